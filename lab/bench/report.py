"""The benchmark pages ``docs/results/bench-cpu.md`` and ``bench-cuda.md``, made from the
``bench.py`` and block-sweep JSON files committed beside them.

    python bench.py --publish out.json ...   # file each JSON by what it measured, rewrite the pages
    python bench.py --publish                # rewrite the pages from the committed JSON
    python bench.py --publish --check        # exit 1 when a page is stale

Every file is read and checked, and both pages made, before any file is filed: a bad file is
one line naming it, exit 2, and nothing written. A JSON is filed by its device (``cpu`` or
``cuda``; another device, such as ``mps``, has no page and is refused) and settings:
``bench.json`` (batch 64, eager), ``bench_bN.json`` (another batch), ``bench_t1.json`` (one CPU
thread, as each worker of a CPU sweep), ``bench_compiled.json`` (``--compile``),
``block_sweep.json`` (``lab.bench.block_sweep``). ``tests/test_readme.py`` checks that each
page holds exactly the tables of its JSON files, so a figure cannot drift from its measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lab.bench.benchmark import ours_vs_theirs
from lab.bench.block_sweep import ratio_table
from lab.common.files import atomic_write
from lab.common.machine import describe
from lab.reporting.tables import format_table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
PAGES = {
    "bench-cpu": (
        "Benchmark on a CPU",
        "a 2-core VM, AMD Zen 4 (the JSON names the device `cpu` only); wall time not recorded",
    ),
    "bench-cuda": (
        "Benchmark on a GPU",
        "one NVIDIA H200, driver 580.159.04; wall time not recorded",
    ),
}
COMMANDS = {  # committed file that does not record its run -> the command that made it
    "bench-cpu/block_sweep.json": "python bench.py --block-sweep --threads 2 --schemes cope "
    "--pairs 16,17,18,19 --lengths 1024,4096 --batch-tokens 8192 --repeats 7 "
    "--out block_sweep.json",
    "bench-cuda/bench.json": "python bench.py --device cuda --repeats 20 --lengths 1024,4096 "
    "--batch-tokens 65536 --baselines --out bench.json",
    "bench-cuda/bench_b1024.json": "python bench.py --device cuda --repeats 20 --lengths '' "
    "--batch 1024 --baselines --out bench_b1024.json",
    "bench-cuda/bench_compiled.json": "python bench.py --device cuda --repeats 20 --lengths 1024 "
    "--batch-tokens 65536 --compile --schemes none,rope,alibi --baselines x-transformers "
    "--out bench_compiled.json",
    "bench-cuda/block_sweep.json": "python bench.py --block-sweep --device cuda "
    "--out block_sweep.json",
}
NOTES = {  # what a committed file does not record about itself
    "bench-cuda/bench_compiled.json": "made by an earlier version, its models timed one after "
    "another with NoPE first (not in interleaved rounds), so its ratios to NoPE may read up to "
    "about 18% high",
}


def scheme_table(results: dict) -> str:
    """Per scheme: training tokens/s, MFU and ratio to NoPE at the standard size and at the
    ablation's size; evaluation tokens/s at the two longest lengths and the longest one's ratio
    to NoPE, where evaluation was measured. (Peak memory stays in the JSON: in one process,
    memory freed by an earlier model is reused without raising the resident set, so it is
    measured in fresh processes instead.)"""
    standard, ablation = results["standard"], results["ablation"]
    lengths = sorted({e["length"] for e in standard["eval"]})[-2:]
    ours = {(e["name"], e["length"]): e["tokens_per_s"] for e in standard["eval"]}
    longest = lengths[-1:]  # [] without evaluation
    rows = []
    for t in standard["train"]:
        if t["baseline"]:
            continue
        small = next(a for a in ablation["train"] if a["name"] == t["name"])
        rows.append(
            [
                t["name"],
                f"{t['tokens_per_s']:,.0f}",
                f"{t['mfu']:.1%}",
                f"{t['vs_none']:.2f}",
                f"{small['tokens_per_s']:,.0f}",
                f"{small['vs_none']:.2f}",
                *(f"{ours[t['name'], n]:,.0f}" for n in lengths),
                *(f"{ours[t['name'], n] / ours['none', n]:.2f}" for n in longest),
            ]
        )
    heads = [
        "scheme",
        "standard: train tok/s",
        "MFU",
        "vs NoPE",
        "ablation size: train tok/s",
        "vs NoPE",
        *(f"eval tok/s at {n}" for n in lengths),
        *(f"eval vs NoPE at {n}" for n in longest),
    ]
    return format_table(heads, rows)


def peer_table(results: dict) -> str:
    """Per peer model with a matching scheme of ours: its training tokens/s and MFU, and ours
    over theirs for training and for evaluation at every benchmarked length (same run)."""
    standard = results["standard"]
    lengths = sorted({e["length"] for e in standard["eval"]})
    rows = []
    for pair in ours_vs_theirs(standard):
        theirs = next(t for t in standard["train"] if t["name"] == pair["baseline"])
        rows.append(
            [
                pair["position"],
                pair["baseline"],
                f"{theirs['tokens_per_s']:,.0f}",
                f"{theirs['mfu']:.1%}",
                f"{pair['train']:.2f}",
                *(f"{pair['eval'][n]:.2f}" for n in lengths),
            ]
        )
    heads = [
        "scheme",
        "peer",
        "peer train tok/s",
        "peer MFU",
        "ours / theirs: train",
        *(f"eval {n}" for n in lengths),
    ]
    return format_table(heads, rows)


def is_block_sweep(results: dict) -> bool:
    """Whether ``results`` is a block sweep's JSON (``lab.bench.block_sweep``)."""
    return "results" in results


class DeviceError(ValueError):
    """A JSON measured on a device that has no page (not ``cpu`` or ``cuda``)."""


def device_page(results: dict) -> str:
    """``'bench-cpu'`` or ``'bench-cuda'``: the page of the device a JSON measured on. A block
    sweep records ``device_name`` only: ``cpu``, a GPU's product name (``NVIDIA H200``) on
    CUDA, or another device's type (``mps``).

    Raises:
        DeviceError: another device (``mps``, ``xpu``, ...), naming it.
        KeyError, TypeError: not a JSON of this version.
    """
    if is_block_sweep(results):
        device = results["device_name"]
        cuda = not (device.isidentifier() and device.islower())  # a product name
    else:
        device = results["standard"]["device"]
        cuda = device == "cuda" or device.startswith("cuda:")
    if device == "cpu":
        return "bench-cpu"
    if not cuda:
        raise DeviceError(
            f"measured on {device!r}; only cpu and cuda results have pages "
            f"({', '.join(f'{name}.md' for name in PAGES)})"
        )
    return "bench-cuda"


def destination(results: dict) -> str:
    """``'bench-cpu/bench.json'``: where a JSON is filed, by its device (:func:`device_page`)
    and settings.

    Raises:
        DeviceError: a device without a page; ValueError: a thread count that is not a whole
            number >= 1; KeyError, TypeError: not a JSON of this version.
    """
    page = device_page(results)
    if is_block_sweep(results):
        return f"{page}/block_sweep.json"
    standard = results["standard"]
    threads = standard["threads"]
    if type(threads) is not int or threads < 1:  # bool is an int subclass: refused too
        raise ValueError(f"records threads={threads!r}; bench.py records a whole number >= 1")
    if standard["compile"]:
        return f"{page}/bench_compiled.json"
    if standard["batch"] != 64:
        return f"{page}/bench_b{standard['batch']}.json"
    # one thread: what each worker of a CPU sweep trains with (one per core)
    one_thread = page == "bench-cpu" and threads == 1
    return f"{page}/bench_t1.json" if one_thread else f"{page}/bench.json"


def bench_tables(results: dict) -> list[str]:
    """The scheme table and, when peers were timed, the peer table of a ``bench.py`` JSON."""
    tables = [scheme_table(results)]
    if any(t["baseline"] for t in results["standard"]["train"]):
        tables.append(peer_table(results))
    return tables


def setting(name: str, results: dict) -> str:
    """What one JSON measured and on what: its command, device, threads, torch, precision,
    batch, matmul peak and timing, as one paragraph."""
    command = COMMANDS.get(name, "python bench.py (settings below)")
    if is_block_sweep(results):
        lengths = sorted({r["length"] for r in results["results"]})
        what = (
            f"evaluation over NoPE's with the blocked path's block size (`default`: the rule "
            f"the device uses; 2^N: a fixed budget of 2^N query-key pairs a block), lengths "
            f"{', '.join(map(str, lengths))}, {results['batch_tokens']:,} tokens a pass; "
            f"{results['device_name']}, {results['threads']} thread(s), torch {results['torch']}, "
            f"{results['repeats']} timed passes; {results['timing']}"
        )
    else:
        s, a = results["standard"], results["ablation"]
        lengths = sorted({e["length"] for e in s["eval"]})
        evaluated = (
            f"evaluation at {', '.join(map(str, lengths))} tokens ({s.get('batch_tokens', 0):,} "
            "tokens a pass)"
            if lengths
            else "training only"
        )
        timing = s.get("timing", "")
        if not lengths:  # nothing evaluated: the timing's evaluation clause does not apply
            timing = timing.split("; evaluation")[0]
        peers = ", ".join(f"{k} {v}" for k, v in results.get("peer_versions", {}).items())
        what = (
            f"training at batch {s['batch']} x {s['seq_len']} (the ablation size at "
            f"{a['batch']} x {a['seq_len']}), "
            f"{'compiled' if s['compile'] else 'eager'}, precision {s['precision']}; {evaluated}; "
            f"{s['device_name']}, {s['threads']} thread(s), torch {s['torch']}, Python "
            f"{s['python']}; matmul peak {s['matmul_peak_gflops']:,.0f} GFLOP/s at the start of "
            f"the standard phase, {a['matmul_peak_gflops']:,.0f} at the ablation size's"
            + (f"; {s['repeats']} timed rounds; {timing}" if timing else "")
            + (f"; peers {peers}" if peers else "")
        )
    note = f" ({NOTES[name]})" if name in NOTES else ""
    run = results.get("run")  # recorded by bench.py since it records its runs
    if run is None:
        return f"`{command}` ([{name.split('/')[1]}]({name})): {what}{note}."
    made = f"run in {run['wall_seconds'] / 60:.1f} min on {describe(run['machine'])}"
    return f"`{run['command']}` ([{name.split('/')[1]}]({name})): {what}{note}; {made}."


def page(name: str, results_dir: Path) -> str:
    """The page ``docs/results/NAME.md`` from every JSON in ``docs/results/NAME/``."""
    title, machine = PAGES[name]
    lines = [f"# {title}", "", "<!-- generated by `python bench.py --publish`; do not edit -->", ""]
    files = sorted((results_dir / name).glob("*.json"), key=lambda p: (p.stem != "bench", p.name))
    everything = [(path, json.loads(path.read_text())) for path in files]
    unrecorded = [path.name for path, results in everything if "run" not in results]
    if unrecorded:
        lines += [f"Machine of {', '.join(unrecorded)} (not recorded in the file): {machine}.", ""]
    for path, results in everything:
        lines += [f"## {path.name}", "", setting(f"{name}/{path.name}", results), ""]
        if is_block_sweep(results):
            lengths = sorted({r["length"] for r in results["results"]})
            tables = [ratio_table(results, n) for n in lengths]
        else:
            tables = bench_tables(results)
        for table in tables:
            lines += [table, ""]
    return "\n".join(lines)


RENDERING = (KeyError, TypeError, StopIteration, ZeroDivisionError, RecursionError)
"""What reading a JSON of another version (or another kind) raises."""


def checked(path: str) -> tuple[str, dict]:
    """Read one ``bench.py`` or block-sweep JSON and check that its section of a page can be
    made; returns where it is filed under :data:`RESULTS` (:func:`destination`) and its content.

    Raises:
        OSError: the file cannot be read.
        ValueError: not JSON, not a JSON of this version, or a device without a page (one line
            naming ``path``).
    """
    try:
        results = json.loads(Path(path).read_text())
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not JSON ({error.reason})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON ({error})") from None
    try:
        name = destination(results)
        if is_block_sweep(results):
            for length in sorted({r["length"] for r in results["results"]}):
                ratio_table(results, length)
        else:
            bench_tables(results)
        setting(name, results)
    except ValueError as error:  # a device without a page, or a bad thread count
        raise ValueError(f"{path} {error}") from None
    except RENDERING as error:
        what = f"missing {error}" if isinstance(error, KeyError) else type(error).__name__
        raise ValueError(
            f"{path} is not a bench.py JSON of this version ({what}); re-run python bench.py"
        ) from None
    return name, results


def filing(paths: list[str]) -> dict[Path, Path]:
    """Where each JSON of ``paths`` is filed under :data:`RESULTS` -> the JSON, all checked
    (:func:`checked`); nothing is written.

    Raises:
        OSError, ValueError: as :func:`checked`, or two files filed in one place (one line).
    """
    filed: dict[Path, Path] = {}
    for path in paths:
        name, _ = checked(path)
        if RESULTS / name in filed:
            raise ValueError(f"{filed[RESULTS / name]} and {path} both file as {name}; give one")
        filed[RESULTS / name] = Path(path)
    return filed


def staged(filed: dict[Path, Path], into: Path) -> Path:
    """``into``, filled with the pages' folders of :data:`RESULTS` as they will be once
    ``filed`` (place -> JSON) is filed; returns ``into``."""
    for name in PAGES:
        if (RESULTS / name).is_dir():
            shutil.copytree(RESULTS / name, into / name)
    for target, source in filed.items():
        (into / target.relative_to(RESULTS)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, into / target.relative_to(RESULTS))
    return into


def stale_pages(filed: dict[Path, Path] | None = None) -> dict[Path, str]:
    """The pages under :data:`RESULTS` whose text differs from what their JSON makes (once
    ``filed``, place -> JSON, is filed) -> the text they should have; writes nothing.

    Raises:
        ValueError: a page cannot be made from its JSON files (one line naming it).
    """
    stale = {}
    with tempfile.TemporaryDirectory() as tmp:
        view = staged(filed, Path(tmp)) if filed else RESULTS
        for name in PAGES:
            path = RESULTS / f"{name}.md"
            try:
                text = page(name, view)
            except (ValueError, *RENDERING) as error:
                what = f"{type(error).__name__}: {error}"
                raise ValueError(
                    f"{shown(path)} cannot be made from its JSON files ({what})"
                ) from None
            if not path.is_file() or path.read_text() != text:
                stale[path] = text
    return stale


def shown(path: Path) -> str:
    """``path`` relative to the project when inside it, for messages."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str]) -> int:
    """``--publish [--check] [JSON ...]``: check the JSON files (:func:`filing`) and make the
    pages, then file the JSON and rewrite the pages that changed, or with ``--check`` exit 1
    when one is stale. Exit 2 on a bad file (one line; nothing written)."""
    parser = argparse.ArgumentParser(
        prog="python bench.py --publish",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is stale")
    parser.add_argument("paths", nargs="*", metavar="BENCH_JSON", help="bench.py JSON to file")
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a malformed line (2, argparse's message)
        return int(done.code or 0)
    if args.check and args.paths:
        print("error: --check takes no files", file=sys.stderr)
        return 2
    try:
        filed = filing(args.paths)
        stale = stale_pages(filed)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for target, source in filed.items():
        if not (target.exists() and os.path.samefile(source, target)):
            replaced = "replacing the committed file" if target.exists() else "a new file"
            atomic_write(target, source.read_bytes())
            print(f"filed {source} as {shown(target)} ({replaced})")
    for path, text in stale.items():
        if args.check:
            print(f"{shown(path)} is stale: run python bench.py --publish", file=sys.stderr)
        else:
            atomic_write(path, text)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
