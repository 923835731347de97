"""The benchmark's arithmetic: model FLOPs per token, and a timing run of every scheme."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import one_error_line

import bench
from lab.bench import report as bench_report
from lab.bench import run as bench_run
from lab.bench.baselines import XTRANSFORMERS_OPTIONS, baselines, library_versions
from lab.bench.benchmark import (
    flops_per_token,
    interleaved_seconds,
    matmul_params,
    ours_vs_theirs,
    run_benchmark,
)
from lab.bench.report import scheme_table
from model import ModelConfig, Transformer
from model.position import available_schemes

ROOT = Path(__file__).resolve().parent.parent
STANDARD = ModelConfig(vocab_size=64, d_model=128, n_layers=4, n_heads=4, d_ff=512)


def test_flops_per_token_of_the_standard_configuration():
    model = Transformer(STANDARD)
    per_layer = 128 * 384 + 128 * 128 + 128 * 512 + 512 * 128  # qkv, out, MLP up, MLP down
    assert matmul_params(model) == 4 * per_layer + 64 * 128  # + the (tied) output projection
    n = 794_624
    assert flops_per_token(model, STANDARD, 64, training=True) == 6 * n + 12 * 4 * 64 * 128
    assert flops_per_token(model, STANDARD, 64, training=False) == 2 * n + 4 * 4 * 64 * 128


@pytest.mark.slow
def test_run_benchmark_reports_every_scheme():
    tiny = ModelConfig(
        vocab_size=16,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=64,
        options={"learned": {"max_positions": 8}},
    )
    result = run_benchmark(tiny, 4, 8, [16], 64, torch.device("cpu"), repeats=2)
    assert [t["name"] for t in result["train"]] == list(available_schemes())
    assert all(t["tokens_per_s"] > 0 and t["mfu"] > 0 for t in result["train"])
    assert next(t for t in result["train"] if t["name"] == "none")["vs_none"] == 1.0
    evals = {e["name"]: e for e in result["eval"]}
    assert evals["learned"]["length"] == 16  # its table is grown to the benchmarked length
    assert all(e["batch"] == 4 for e in result["eval"])


def test_eval_memory_counts_the_score_matrix():
    # CoPE materialises (1, 4, 2048, 2048) fp32 scores for its gates: 64 MiB, past glibc's
    # largest mmap threshold (32 MiB), so they are mapped on allocation and must show in the
    # peak (ALiBi's bias no longer is: long sequences build it block by block). A fresh
    # process, so that the peak is this measurement's even where it cannot be reset.
    code = (
        "import torch; from lab.bench.benchmark import eval_speed; from model import ModelConfig; "
        "c = ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=4, d_ff=64, "
        "position='cope'); s = eval_speed(c, 2048, 2048, torch.device('cpu'), 1); "
        "print(s.batch, s.peak_mib)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    batch, peak_mib = out.stdout.split()
    assert int(batch) == 1
    assert float(peak_mib) >= 60


def test_x_transformers_baselines_match_our_size_and_scheme_names():
    tiny = ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    peers = baselines(tiny, ["x-transformers"])
    assert [b.position for b in peers] == list(XTRANSFORMERS_OPTIONS)
    assert set(XTRANSFORMERS_OPTIONS) <= set(available_schemes())
    ours = matmul_params(Transformer(tiny))
    idx = torch.randint(0, 16, (2, 24))
    for b in peers:
        model = b.build(24)
        assert model(idx).shape == (2, 24, 16), b.name
        # the same matrices, less the tied output projection, which theirs is not a Linear for
        assert matmul_params(model) == ours - 16 * 32, b.name


def test_interleaved_seconds_warms_each_then_times_in_shuffled_rounds():
    calls = []
    fns = [lambda name=name: calls.append(name) for name in "abcde"]
    medians = interleaved_seconds(fns, repeats=3, warmup=2)
    assert calls[:10] == list("aabbccddee")
    rounds = [calls[10:15], calls[15:20], calls[20:25]]
    assert all(sorted(r) == list("abcde") for r in rounds)  # each round calls each once
    assert len({tuple(r) for r in rounds}) > 1  # in changing orders
    assert len(medians) == 5 and all(0 <= m < 0.1 for m in medians)


def test_interleaved_seconds_settles_each_function_before_timing_it():
    calls = []
    fns = [lambda name=name: calls.append(name) for name in "abc"]
    interleaved_seconds(fns, repeats=2, warmup=0, settle=1)
    pairs = [calls[i : i + 2] for i in range(0, len(calls), 2)]  # (untimed, timed) calls
    assert len(pairs) == 6 and all(first == second for first, second in pairs)
    assert sorted(first for first, _ in pairs[:3]) == list("abc")  # still one per round


def test_peer_library_versions_are_the_installed_packages():
    from importlib.metadata import version

    assert library_versions(["hf", "x-transformers"]) == {
        "transformers": version("transformers"),
        "x-transformers": version("x-transformers"),
    }
    assert library_versions([]) == {}


def test_a_subset_of_schemes_keeps_none_and_the_matching_peers():
    tiny = ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=4, d_ff=64)
    peers = baselines(tiny, ["x-transformers"])
    result = run_benchmark(tiny, 2, 8, [16], 32, torch.device("cpu"), 1, peers, schemes=["alibi"])
    assert (result["repeats"], result["eval_repeats"], result["batch_tokens"]) == (1, 5, 32)
    names = ["none", "alibi", "x-transformers none", "x-transformers alibi"]
    assert [t["name"] for t in result["train"]] == names
    assert [e["name"] for e in result["eval"]] == names
    with pytest.raises(ValueError, match="scheme 'alibj' is unknown; use none, learned"):
        run_benchmark(tiny, 2, 8, [], 32, torch.device("cpu"), 1, schemes=["alibj"])


@pytest.mark.slow
def test_ours_vs_theirs_pairs_each_baseline_with_its_scheme():
    tiny = ModelConfig(vocab_size=16, d_model=32, n_layers=1, n_heads=4, d_ff=64)
    peers = [b for b in baselines(tiny, ["x-transformers"]) if b.position in ("none", "alibi")]
    result = run_benchmark(tiny, 4, 8, [16, 32], 64, torch.device("cpu"), 2, peers)
    pairs = ours_vs_theirs(result)
    assert [(p["baseline"], p["position"]) for p in pairs] == [
        ("x-transformers none", "none"),
        ("x-transformers alibi", "alibi"),
    ]
    for p in pairs:
        theirs = next(t for t in result["train"] if t["name"] == p["baseline"])
        ours = next(t for t in result["train"] if t["name"] == p["position"])
        assert p["train"] == ours["tokens_per_s"] / theirs["tokens_per_s"]
        assert sorted(p["eval"]) == [16, 32] and all(r > 0 for r in p["eval"].values())


def test_an_unknown_baseline_library_is_one_line():
    with pytest.raises(ValueError, match="--baselines 'keras' is unknown; use hf, x-transformers"):
        baselines(ModelConfig(vocab_size=16), ["keras"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "/no/such/folder/bench.json"], "folder '/no/such/folder' does not exist"),
        (["--batch-tokens", "0"], "--batch-tokens=0 is invalid; it must be >= 1"),
        (["--batch", "0"], "--batch=0 is invalid; it must be >= 1"),
        (["--lengths", "256,0"], "--lengths=0 is invalid; it must be >= 1"),
        (["--out", "/tmp"], "--out='/tmp' must name a file, not a folder"),
        (["--out", "README.md/x.json"], "--out=README.md/x.json: 'README.md' is not a folder"),
        (["--schemes", "rope,alibj"], "--schemes 'alibj' is unknown; use none, learned"),
        (["--out", "README.md"], "--out='README.md' is a file this command did not write"),
    ],
)
def test_bench_refuses_bad_arguments_before_timing_anything(argv, message, capsys):
    assert bench.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_bench_report_help_is_usage_not_a_file_name(capsys):
    assert bench_report.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python bench.py --publish")


def test_bench_publish_files_a_json_by_what_it_measured(tmp_path, monkeypatch):
    """A CPU run at batch 64 becomes bench-cpu/bench.json and its page holds its tables; the
    same run at another batch or compiled is filed beside it, a CUDA run on the GPU page."""
    monkeypatch.setattr(bench_report, "RESULTS", tmp_path / "results")
    results = json.loads((ROOT / "docs" / "results" / "bench-cpu" / "bench.json").read_text())
    path = tmp_path / "out.json"
    path.write_text(json.dumps(results))
    assert bench_report.main([str(path)]) == 0
    page = (tmp_path / "results" / "bench-cpu.md").read_text()
    assert scheme_table(results) in page and "peer train tok/s" in page
    assert (tmp_path / "results" / "bench-cpu" / "bench.json").read_text() == path.read_text()
    assert bench_report.main(["--check"]) == 0
    for key, value, where in (
        ("batch", 1024, "bench-cpu/bench_b1024.json"),
        ("compile", True, "bench-cpu/bench_compiled.json"),
        ("threads", 1, "bench-cpu/bench_t1.json"),
        ("device", "cuda", "bench-cuda/bench.json"),
    ):
        changed = json.loads(json.dumps(results))
        changed["standard"][key] = value
        assert bench_report.destination(changed) == where
    on_gpu = json.loads(json.dumps(results))
    on_gpu["standard"].update(device="cuda", threads=1)
    assert bench_report.destination(on_gpu) == "bench-cuda/bench.json"


def test_bench_report_without_peers_and_on_bad_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_report, "RESULTS", tmp_path / "results")
    results = json.loads((ROOT / "docs" / "results" / "bench-cpu" / "bench.json").read_text())
    for size in ("standard", "ablation"):
        for key in ("train", "eval"):
            results[size][key] = [r for r in results[size][key] if not r["baseline"]]
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps(results))
    assert bench_report.main([str(alone)]) == 0
    page = (tmp_path / "results" / "bench-cpu.md").read_text()
    assert scheme_table(results) in page and "peer train tok/s" not in page
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"standard": {"train": [{"position": "none"}]}}))
    for row in results["standard"]["eval"]:
        row["tokens_per_s"] = 0.0  # NoPE's too: a ratio to it cannot be formed
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps(results))
    for argv, message in (
        ([str(old)], "not a bench.py JSON of this version (missing"),
        ([str(zero)], "not a bench.py JSON of this version (ZeroDivisionError)"),
        ([str(tmp_path)], "error:"),
        (["--check", str(alone)], "--check takes no files"),
    ):
        assert bench_report.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


def test_ctrl_c_during_a_benchmark_writes_nothing(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_run, "run_benchmark", interrupted)
    out = tmp_path / "bench.json"
    assert bench.main(["--out", str(out), "--threads", "1"]) == 130
    assert not out.exists()
    assert capsys.readouterr().err.strip() == f"interrupted: nothing written to {out}"


def test_a_benchmark_records_its_run_and_its_page_states_it(tmp_path, monkeypatch, capsys):
    """bench.py writes its command line, wall time and machine into the JSON; publishing files
    a one-thread run as bench_t1.json, says so, and the page quotes that command and machine
    (not the committed file's), with no evaluation clause for a training-only run."""
    committed = json.loads((ROOT / "docs" / "results" / "bench-cpu" / "bench_t1.json").read_text())
    measured = {k: v for k, v in committed.items() if k != "run"}
    monkeypatch.setattr(bench, "measure", lambda *args, **kwargs: json.loads(json.dumps(measured)))
    out = tmp_path / "mine.json"
    assert bench.main(["--threads", "1", "--lengths", "", "--out", str(out)]) == 0
    run = json.loads(out.read_text())["run"]
    assert run["command"] == f"python bench.py --threads 1 --lengths '' --out {out}"
    assert 0 <= run["wall_seconds"] < 60 and run["machine"]["cpu_count"] >= 1
    results_dir = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results" / "bench-cpu", results_dir / "bench-cpu")
    monkeypatch.setattr(bench_report, "RESULTS", results_dir)
    capsys.readouterr()
    assert bench_report.main([str(out)]) == 0
    filed = results_dir / "bench-cpu" / "bench_t1.json"
    assert capsys.readouterr().out == (f"filed {out} as {filed} (replacing the committed file)\n")
    page = (results_dir / "bench-cpu.md").read_text()
    section = page.split("## bench_t1.json")[1].split("## ")[0]
    assert f"`{run['command']}`" in section and "training only" in section
    assert "evaluation: an untimed pass" not in section
    assert f"run in 0.0 min on {run['machine']['cpu_count']}-core" in section
    assert "--out /work/scratch/bench_t1.json" not in page  # the committed run is replaced


@pytest.mark.parametrize("threads", ["1", 0, None, [1], True, 1.0])
def test_a_bad_thread_count_is_refused_in_one_line(threads, tmp_path, monkeypatch, capsys):
    """A thread count that is not a whole number >= 1 would pick the wrong file (``True == 1``
    and ``"1"`` or ``0`` are not one thread): one line naming it, nothing written."""
    monkeypatch.setattr(bench_report, "RESULTS", tmp_path / "results")
    results = json.loads((ROOT / "docs" / "results" / "bench-cpu" / "bench_t1.json").read_text())
    results["standard"]["threads"] = threads
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(results))
    assert bench_report.main([str(bad)]) == 2
    assert f"bad.json records threads={threads!r}" in one_error_line(capsys)
    assert not (tmp_path / "results").exists()


def test_other_programs_are_flags_of_bench_py(capsys, tmp_path):
    """``--publish`` and ``--block-sweep`` hand the rest of the command line to their program."""
    assert "--publish" in bench.build_parser().format_help()
    assert "--block-sweep" in bench.build_parser().format_help()
    assert bench.main(["--publish", "--help"]) == 0
    assert "BENCH_JSON" in capsys.readouterr().out.splitlines()[0]
    assert bench.main(["--publish", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in one_error_line(capsys)
    with pytest.raises(SystemExit) as done:
        bench.main(["--block-sweep", "--help"])
    assert done.value.code == 0 and "--pairs" in capsys.readouterr().out
    assert bench.main(["--block-sweep", "--schemes", "none", "--out", str(tmp_path / "b")]) == 2
    assert "must name schemes other than none" in one_error_line(capsys)
    assert bench.main(["--threads", "1", "--publish", "bench.json"]) == 2
    assert "--publish must be the first argument" in one_error_line(capsys)


def test_bench_publish_files_nothing_when_one_file_is_bad(tmp_path, monkeypatch, capsys):
    """Every file is checked (and every page made) before any is filed: a bad one, a device
    without a page (MPS), or two files for one place is one line naming it, exit 2, and
    nothing written."""
    results_dir = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results" / "bench-cpu", results_dir / "bench-cpu")
    monkeypatch.setattr(bench_report, "RESULTS", results_dir)
    before = {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()}
    results = json.loads((ROOT / "docs" / "results" / "bench-cpu" / "bench.json").read_text())
    results["standard"]["batch"] = 32
    good = tmp_path / "good.json"
    good.write_text(json.dumps(results))
    mps, sweep_mps = tmp_path / "mps.json", tmp_path / "sweep_mps.json"
    mps.write_text(json.dumps({**results, "standard": {**results["standard"], "device": "mps"}}))
    block = json.loads((ROOT / "docs" / "results" / "bench-cpu" / "block_sweep.json").read_text())
    sweep_mps.write_text(json.dumps({**block, "device_name": "mps"}))
    bad, listed = tmp_path / "bad.json", tmp_path / "list.json"
    bad.write_text("not json")
    listed.write_text("[]")
    for paths, message in (
        ([good, bad], "bad.json is not JSON"),
        ([good, listed], "list.json is not a bench.py JSON of this version"),
        ([good, mps], "mps.json measured on 'mps'"),
        ([good, sweep_mps], "sweep_mps.json measured on 'mps'"),
        ([good, good], "both file as bench-cpu/bench_b32.json"),
    ):
        assert bench_report.main([str(p) for p in paths]) == 2, message
        assert message in one_error_line(capsys)
        assert {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()} == before, message
        assert not (results_dir / "bench-cpu.md").exists()
    changed = {**results, "standard": {**results["standard"], "device": "cuda:1"}}
    assert bench_report.destination(changed) == "bench-cuda/bench_b32.json"


def test_bench_publish_of_a_committed_file_onto_itself(tmp_path, monkeypatch):
    results_dir = tmp_path / "results"
    for name in bench_report.PAGES:
        shutil.copytree(ROOT / "docs" / "results" / name, results_dir / name)
        shutil.copyfile(ROOT / "docs" / "results" / f"{name}.md", results_dir / f"{name}.md")
    monkeypatch.setattr(bench_report, "RESULTS", results_dir)
    before = {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()}
    assert bench_report.main([str(results_dir / "bench-cpu" / "bench.json")]) == 0
    assert {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()} == before
