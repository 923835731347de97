"""The ``text`` task: byte windows of a corpus, the standard-library corpus and its split, user
files, option errors, and the corpus a run records (resume refused on another corpus)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import eval as eval_cli
from data import build_task
from data.streams import training_batch
from data.text import EXCLUDED_FOLDERS, STDLIB, load_corpus, stdlib_files
from lab.common.checkpoint import load_checkpoint
from lab.common.config import ConfigError, load_config
from lab.evaluation.evaluate import evaluate_run
from lab.lm.perplexity import lm_lengths
from lab.sweeps.sweep import RunSpec, changed_settings, check_unchanged
from lab.training.resume import resume_config
from lab.training.trainer import train

PATTERN = b"0123456789abcdef\n"
"""A period-17 pattern of distinct bytes: each byte determines the next one."""


def pattern_file(tmp_path: Path, repeats: int = 1200, name: str = "pattern.txt") -> Path:
    """A file of ``PATTERN`` repeated (20,400 bytes: 18,360 trained on, 2,040 held out)."""
    path = tmp_path / name
    path.write_bytes(PATTERN * repeats)
    return path


def tiny_lm(run_dir: Path, corpus: Path, *overrides: str) -> list[str]:
    """Overrides of a tiny language-model run on ``corpus`` at training length 32."""
    return [
        "data.task=text",
        f"data.options.text.path={corpus}",
        "data.train_min_length=32",
        "data.train_max_length=32",
        "model.d_model=32",
        "model.n_layers=2",
        "model.n_heads=2",
        "model.d_ff=64",
        "model.dropout=0.0",
        "train.steps=4",
        "train.warmup_steps=1",
        "train.batch_size=16",
        "train.eval_every=2",
        "train.eval_samples=8",
        "train.checkpoint_every=2",
        "train.progress=false",
        "eval.lm_tokens=1024",
        "device=cpu",
        "threads=1",
        f"run_dir={run_dir}",
        *overrides,
    ]


def test_the_vocabulary_is_bytes_then_the_special_tokens() -> None:
    task = build_task("text")
    assert task.vocab_size == 259 and task.language_model
    assert [task.token_id(t) for t in ("<bos>", "<sep>", "<eos>")] == [256, 257, 258]
    assert task.vocab[ord("a")] == "a" and task.vocab[10] == "\\x0a" and task.vocab[0xFF] == "\\xff"
    assert len(set(task.vocab)) == 259
    assert task.decode([104, 105, 10, 256]) == "hi\n<bos>"


def test_a_batch_is_windows_of_the_training_split_and_a_function_of_seed_and_step(
    tmp_path: Path,
) -> None:
    task = build_task("text", {"path": str(pattern_file(tmp_path))})
    corpus = task.corpus
    batch = training_batch(task, 3, 7, 16, range(32, 33))
    assert batch.tokens.shape == (16, 33) and batch.answer_start == 1 and batch.length == 32
    assert batch.inputs.shape == (16, 32) and batch.answer_targets.shape == (16, 32)
    text = corpus.train.tobytes()
    for row in batch.tokens.tolist():
        assert bytes(row) in text and max(row) < 256  # a slice of the split, no special token
    again = training_batch(build_task("text", {"path": str(pattern_file(tmp_path))}), 3, 7, 16,
                           range(32, 33))  # fmt: skip
    assert torch.equal(batch.tokens, again.tokens)
    assert not torch.equal(batch.tokens, training_batch(task, 3, 8, 16, range(32, 33)).tokens)


def test_a_single_file_holds_out_its_last_tenth_and_its_digest_follows_its_bytes(
    tmp_path: Path,
) -> None:
    path = pattern_file(tmp_path)
    corpus = load_corpus(str(path))
    data = path.read_bytes()
    assert corpus.train.tobytes() + corpus.heldout.tobytes() == data
    assert corpus.heldout.size == len(data) // 10 and corpus.files == (1, 1)
    assert corpus.source == str(path) and corpus.python is None
    assert load_corpus(str(path)) is corpus  # loaded once per process
    other = pattern_file(tmp_path, 1201, "other.txt")
    assert load_corpus(str(other)).sha256 != corpus.sha256
    record = corpus.record()
    assert record == {
        "source": str(path),
        "sha256": corpus.sha256,
        "python": None,
        "files": [1, 1],
        "heldout_tokens": 2040,
    }


def test_a_folder_holds_out_every_tenth_file_in_sorted_order(tmp_path: Path) -> None:
    folder = tmp_path / "texts"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "x.txt").write_text("hidden")  # hidden: left out
    for i in range(20):
        (folder / f"f{i:02d}.txt").write_text(f"file {i}\n")
    (folder / "skip.md").write_text("not a .txt")
    corpus = load_corpus(str(folder), 10, ".txt")
    assert corpus.files == (18, 2)
    assert corpus.heldout.tobytes() == b"file 9\nfile 19\n"
    assert b"hidden" not in corpus.train.tobytes() and b".txt" not in corpus.train.tobytes()
    assert load_corpus(str(folder), 10, None).files == (19, 2)  # every file, skip.md too


def test_the_stdlib_corpus_excludes_tests_and_packages_and_splits_deterministically() -> None:
    root, files = stdlib_files()
    assert files == sorted(files, key=lambda p: p.as_posix()) and len(files) > 100
    assert all(p.suffix == ".py" and not EXCLUDED_FOLDERS & set(p.parts[:-1]) for p in files)
    assert not any("site-packages" in p.parts or "test" in p.parts for p in files)
    corpus = build_task("text").corpus
    assert corpus.source == STDLIB and corpus.python is not None
    assert corpus.files == (len(files) - len(files) // 10, len(files) // 10)
    heldout = b"".join((root / p).read_bytes() for p in files[9::10])
    assert corpus.heldout.tobytes() == heldout  # files 9, 19, 29, ... in sorted order
    load_corpus.cache_clear()
    again = build_task("text").corpus
    assert again is not corpus and again.sha256 == corpus.sha256
    assert np.array_equal(again.train, corpus.train)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("data.options.text.holdout_every=1", "holdout_every=1 is invalid"),
        ("data.options.text.path=/no/such/file.txt", "does not exist"),
        ("data.options.text.extensions=.txt,", "extensions='.txt,' is invalid"),
        ("train.target_accuracy=0.99", "train.target_accuracy=0.99 is invalid for task 'text'"),
        ("eval.lm_tokens=0", "eval.lm_tokens=0 is invalid"),
        ("eval.stride=0", "eval.stride=0 is invalid"),
    ],
)
def test_bad_text_settings_fail_with_one_line(override: str, named: str) -> None:
    message = one_line_error(["data.task=text", override])
    assert named in message


def one_line_error(overrides: list[str]) -> str:
    """The one-line ConfigError of a config with ``overrides``."""
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_a_run_inside_its_corpus_folder_is_refused_and_nothing_written(
    tmp_path: Path, capsys
) -> None:
    """A run (or a sweep's runs) inside the corpus folder once trained, then read its own
    checkpoint and reports as corpus text; a folder beside the corpus is fine."""
    import sweep

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        pattern_file(corpus, name=name)
    overrides = [*tiny_lm(corpus / "run", corpus), "data.options.text.holdout_every=3"]
    message = one_line_error(overrides)
    assert message.startswith(f"run_dir={str(corpus / 'run')!r} lies inside data.options.text.")
    assert "which the task reads" in message
    assert load_config(None, [*overrides, f"run_dir={tmp_path / 'run'}"]).run_dir
    base = OmegaConf.from_dotlist([o for o in overrides if not o.startswith("run_dir=")])
    sweep_file = tmp_path / "sweep.yaml"
    OmegaConf.save({"base": base, "grid": {"model.position": ["rope"]}}, sweep_file)
    assert sweep.main(["--config", str(sweep_file), f"out_dir={corpus / 'sweep'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lies inside data.options.text.path=" in err, err
    assert sorted(p.name for p in corpus.iterdir()) == ["a.txt", "b.txt", "c.txt"]
    # eval.py --out inside the corpus wrote its reports into it, and the run's data changed
    # under it (it could no longer be evaluated or resumed): refused, nothing written
    run = tmp_path / "run"
    kept = [o for o in overrides if not o.startswith("run_dir=")]
    train(load_config(None, [*kept, f"run_dir={run}", "train.steps=2"]))
    assert eval_cli.main([str(run), "--out", str(corpus / "rep"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--out={str(corpus / 'rep')!r} lies inside data.options.text.path=" in err, err
    assert sorted(p.name for p in corpus.iterdir()) == ["a.txt", "b.txt", "c.txt"]


def test_a_file_too_short_for_the_training_length_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_bytes(PATTERN * 5)  # 85 bytes: 77 trained on, 4x the length 32 needs 129
    with pytest.raises(ConfigError, match="needs windows of 129 bytes") as error:
        load_config(None, tiny_lm(tmp_path / "run", path))
    assert "\n" not in str(error.value)


def test_a_run_records_its_corpus_and_resume_refuses_another(tmp_path: Path) -> None:
    path = pattern_file(tmp_path)
    run_dir = tmp_path / "run"
    config = load_config(None, tiny_lm(run_dir, path, "train.steps=2"))
    result = train(config)
    assert set(result.eval) == {"perplexity_1x", "perplexity_2x", "perplexity_4x"}
    assert all(value > 1 for value in result.eval.values())
    state = load_checkpoint(run_dir)
    corpus = load_corpus(str(path))
    assert state["corpus"] == corpus.record()
    path.write_bytes(PATTERN * 1100)  # the corpus changes between two processes
    load_corpus.cache_clear()
    changed = load_corpus(str(path)).sha256
    resumed = resume_config(run_dir, ["train.steps=4"])
    with pytest.raises(ConfigError) as error:
        train(resumed, resume=True)
    message = str(error.value)
    assert corpus.sha256 in message and changed in message and "\n" not in message
    with pytest.raises(ConfigError, match=f"cannot evaluate .*{changed}"):  # nor evaluates it
        evaluate_run(run_dir)
    path.write_bytes(PATTERN * 1200)  # the same bytes again: it resumes
    load_corpus.cache_clear()
    assert train(resume_config(run_dir, ["train.steps=4"]), resume=True).step == 4


def test_a_sweep_never_skips_a_run_trained_on_a_corpus_that_changed(tmp_path: Path) -> None:
    """A sweep (or extend study) re-run after a corpus file changed skipped its runs at exit 0
    and rewrote its reports from the old corpus's runs, where eval.py refuses them: the corpus
    is now a setting the skip check compares, so the re-run is refused before anything runs,
    and --overwrite retrains (prepare_out_dir, check_unchanged)."""
    path = pattern_file(tmp_path)
    overrides = tiny_lm(tmp_path / "run", path, "train.steps=2")
    train(load_config(None, overrides))
    spec = RunSpec("run", overrides)
    old = load_corpus(str(path)).sha256
    assert changed_settings(spec) == []
    path.write_bytes(PATTERN * 1100)
    load_corpus.cache_clear()
    new = load_corpus(str(path)).sha256
    assert changed_settings(spec) == [f"corpus.sha256: {old[:12]} -> {new[:12]} ({path})"]
    with pytest.raises(ConfigError, match=r"holds a run trained with other settings .*corpus"):
        check_unchanged(spec)


@pytest.mark.parametrize(
    ("override", "named"),
    [("eval.stride=100", "eval.stride=100 is longer"), ("eval.lm_tokens=10", "lm_tokens=10")],
)
def test_training_refuses_what_its_evaluation_would(tmp_path: Path, override, named) -> None:
    """A run whose saved evaluation settings eval.py would refuse is refused before training."""
    config = load_config(None, tiny_lm(tmp_path / "run", pattern_file(tmp_path), override))
    with pytest.raises(ConfigError, match=named):
        train(config)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()  # nothing trained


def test_an_empty_path_is_refused_not_read_as_the_standard_library(tmp_path: Path) -> None:
    """``data.options.text.path=$CORPUS`` with the variable unset: one line, not the stdlib."""
    message = one_line_error(["data.task=text", "data.options.text.path="])
    assert message == (
        "data.options.text.path='' is empty (an unset shell variable?); give a file or folder, "
        "or null for the standard library's source"
    )
    assert (
        load_config(None, ["data.task=text", "data.options.text.path=null"]).data.options["text"][
            "path"
        ]
        is None
    )  # null still means the standard library


def test_a_bad_extensions_value_among_many_overrides_names_that_key_alone(
    tmp_path: Path,
) -> None:
    overrides = tiny_lm(tmp_path / "run", tmp_path, "data.options.text.extensions=,")
    message = one_line_error(overrides)
    assert message.startswith("data.options.text.extensions=',' is invalid: an ending is empty")
    assert "YAML" not in message and "model.d_model" not in message  # not the 17 other overrides
    assert "extensions=' ,.txt' is invalid" in one_line_error(
        ["data.task=text", "data.options.text.extensions= ,.txt"]
    )  # a blank ending would match every file


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_as_the_corpus_is_refused_as_not_a_regular_file(
    tmp_path: Path, kind: str
) -> None:
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
        words = "a named pipe (FIFO)"
    else:
        path, words = Path("/dev/zero"), "a character device"
    message = one_line_error(["data.task=text", f"data.options.text.path={path}"])
    assert message == (
        f"data.options.text.path={str(path)!r} is {words}, not a regular file or folder; give "
        "a text file or a folder of them"
    )


def test_extensions_given_with_a_single_file_are_refused_not_ignored(tmp_path: Path) -> None:
    path = pattern_file(tmp_path)
    message = one_line_error(
        ["data.task=text", f"data.options.text.path={path}", "data.options.text.extensions=.md"]
    )
    assert message == (
        f"data.options.text.path={str(path)!r} is a single file, and "
        "data.options.text.extensions='.md' only selects the files of a folder; set "
        "data.options.text.extensions=null"
    )


def test_each_corpus_error_names_the_path_and_its_actual_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / ".notes.txt").write_bytes(PATTERN)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    cases = {
        f"data.options.text.path={str(hidden)!r} holds no (non-hidden) regular file": [
            f"data.options.text.path={hidden}"
        ],
        "the standard library holds no file ending in .zzz (data.options.text.extensions='.zzz')": [
            "data.options.text.extensions=.zzz"
        ],
        f"data.options.text.path={str(empty)!r} is empty: too few to train on": [
            f"data.options.text.path={empty}"
        ],
    }
    for named, overrides in cases.items():
        message = one_line_error(["data.task=text", *overrides])
        assert message.startswith(named) and "None" not in message
    path = pattern_file(tmp_path)
    real = Path.read_bytes

    def unreadable(self: Path) -> bytes:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    message = one_line_error(["data.task=text", f"data.options.text.path={path}"])
    assert message == (
        f"cannot read the corpus file {str(path)!r}: Permission denied (data.options.text.path)"
    )


def test_a_language_model_factor_is_checked_at_the_lengths_it_really_evaluates() -> None:
    """Its lengths are powers of 2 times the training length: 65 stops at 64x (4096 tokens)."""
    config = load_config(None, ["data.task=text", "eval.max_length_factor=65"])
    assert max(lm_lengths(config, config.eval).items(), key=lambda kv: kv[1]) == ("64x", 4096)
    message = one_line_error(["data.task=text", "eval.max_length_factor=128"])
    assert message == (
        "eval.max_length_factor=128.0 is too long: eval.py (a language-model run's lengths are "
        "1x, 2x, 4x ... up to 128x) needs length 8192 (over 4096 tokens for task 'text'); the "
        "maximum is 4096 tokens per sequence"
    )
