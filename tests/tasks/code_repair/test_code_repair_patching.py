import pytest

from envhub.tasks.code_repair.patching import PatchError, apply_patch

FILES = {"src/a.py": "one\ntwo\nthree\nfour\n", "src/b.py": "alpha\nbeta\n"}


def test_applies_multi_file_multi_hunk_diffs():
    patch = (
        "--- a/src/a.py\n+++ b/src/a.py\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n@@ -4,1 +4,2 @@\n four\n+five\n"
        "--- a/src/b.py\n+++ b/src/b.py\n@@ -1,2 +1,1 @@\n-alpha\n beta\n"
    )
    assert apply_patch(FILES, patch) == {"src/a.py": "ONE\ntwo\nthree\nfour\nfive\n", "src/b.py": "beta\n"}


def test_new_file_and_no_newline_marker():
    patch = "--- /dev/null\n+++ b/src/c.py\n@@ -0,0 +1,1 @@\n+x = 1\n\\ No newline at end of file\n"
    assert apply_patch(FILES, patch) == {"src/c.py": "x = 1"}


@pytest.mark.parametrize("patch, needle", [
    ("--- a/src/a.py\n+++ b/src/a.py\n@@ -1,1 +1,1 @@\n-uno\n+ONE\n", "does not match at line 1"),
    ("--- a/src/zz.py\n+++ b/src/zz.py\n@@ -1,1 +1,1 @@\n-a\n+b\n", "does not exist"),
    ("just text", "no file headers"),
    ("--- a/src/a.py\n+++ b/src/a.py\n@@ nonsense @@\n", "malformed hunk header"),
])
def test_mismatches_are_errors_not_guesses(patch, needle):
    with pytest.raises(PatchError, match=needle):
        apply_patch(FILES, patch)
