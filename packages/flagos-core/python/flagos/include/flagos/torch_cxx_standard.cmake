# Sets CMAKE_CXX_STANDARD to the standard torch builds its own C++ extensions with
# (torch.utils.cpp_extension): C++20 from torch 2.12 on (2.14's headers need it), C++17
# before. Include it after Python_EXECUTABLE is known, before the targets that include
# torch's headers; every flagos package compiled against torch shares this rule.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import torch; print(torch.__version__.split('+')[0])"
  OUTPUT_VARIABLE FLAGOS_TORCH_RELEASE OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
if(FLAGOS_TORCH_RELEASE VERSION_GREATER_EQUAL 2.12)
  set(CMAKE_CXX_STANDARD 20)
else()
  set(CMAKE_CXX_STANDARD 17)
endif()
