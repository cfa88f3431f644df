import subprocess
import sys

from flagos_hal.linecount import code_lines

SNIPPET = r'''// a comment line
#include <x>   // trailing comment
/* a block
   comment */
int a = 1; /* inline */ int b = 2;

const char* s = "not // a comment";
const char* t = "/* nor this */";
char c = '"';
   /* one */ /* two */
}
'''


def test_code_lines_skip_blank_and_comment_lines():
    # #include, int a.., const char* s, const char* t, char c, }
    assert code_lines(SNIPPET) == 6
    assert code_lines("") == 0
    assert code_lines("/* unterminated\nstill comment\n") == 0


def test_cli_counts_files_and_directories(tmp_path):
    (tmp_path / "a.cpp").write_text(SNIPPET)
    (tmp_path / "b.hpp").write_text("int x;\n\n// c\n")
    (tmp_path / "notes.txt").write_text("int not_code;\n")
    r = subprocess.run([sys.executable, "-m", "flagos_hal", "count-lines", str(tmp_path)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert f"7  total of {tmp_path} (2 files)" in r.stdout
    r = subprocess.run([sys.executable, "-m", "flagos_hal", "count-lines", str(tmp_path / "nope")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "does not exist" in r.stderr
