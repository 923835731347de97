"""lab.common.files: atomic writes replace the destination, never write through a link, and leave
nothing behind when interrupted."""

from pathlib import Path

import pytest

from lab.common.files import atomic_write, atomic_writer


def test_atomic_write_replaces_a_symlink_instead_of_following_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").symlink_to(outside)
    atomic_write(run / "eval.json", "new")
    assert outside.read_text() == "precious"
    assert not (run / "eval.json").is_symlink()
    assert (run / "eval.json").read_text() == "new"


def test_interrupted_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_writer(path) as file:
        file.write(b"half")
        raise KeyboardInterrupt
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_text_and_bytes(tmp_path: Path) -> None:
    assert atomic_write(tmp_path / "a" / "b.txt", "é\n").read_bytes() == "é\n".encode()
    assert atomic_write(tmp_path / "c.bin", b"\x00\x01").read_bytes() == b"\x00\x01"


def test_written_files_get_the_mode_open_would_give(tmp_path: Path) -> None:
    """mkstemp alone makes 0600 files: results unreadable to the other users of a machine."""
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert atomic_write(tmp_path / "atomic.txt", "x").stat().st_mode & 0o777 == (
        plain.stat().st_mode & 0o777
    )
