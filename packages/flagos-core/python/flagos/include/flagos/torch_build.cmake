# What every flagos package compiled against torch needs to know about that torch, found
# once here; include it after Python_EXECUTABLE is known, before the targets:
# - TORCH_DIR, TORCH_CXX11_ABI: the torch of the environment (built without isolation);
# - CMAKE_CXX_STANDARD: the standard torch builds its own C++ extensions with
#   (torch.utils.cpp_extension): C++20 from torch 2.12 on (2.14's headers need it), 17 before;
# - FLAGOS_LIBSTDCXX: libstdc++ as the shared library the process already holds, to link
#   against (a toolchain that links it statically puts a second copy in the process, which
#   breaks iostreams: c10::str crashed).
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import torch, os; print(os.path.dirname(torch.__file__))"
  OUTPUT_VARIABLE TORCH_DIR OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE TORCH_CXX11_ABI OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import torch; print(torch.__version__.split('+')[0])"
  OUTPUT_VARIABLE FLAGOS_TORCH_RELEASE OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
if(FLAGOS_TORCH_RELEASE VERSION_GREATER_EQUAL 2.12)
  set(CMAKE_CXX_STANDARD 20)
else()
  set(CMAKE_CXX_STANDARD 17)
endif()
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6
  OUTPUT_VARIABLE FLAGOS_LIBSTDCXX OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT IS_ABSOLUTE "${FLAGOS_LIBSTDCXX}")
  set(FLAGOS_LIBSTDCXX stdc++)
endif()
