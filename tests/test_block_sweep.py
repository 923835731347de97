"""The block-size sweep: ``model.blocked_attention.block_pairs`` sets every blocked mask's rows,
and ``python bench.py --block-sweep`` times each budget against NoPE and writes what it
measured."""

import json

import pytest
import torch

from lab.bench import block_sweep
from model import blocked_attention
from model.attention import SelfAttention
from model.blocked_attention import fixed_block_pairs

T = 300  # > BLOCK_ROWS: masked schemes take the blocked path


@pytest.mark.parametrize("scheme", ["alibi", "fire", "cope"])  # Toeplitz, per window, per layer
def test_block_pairs_sets_the_rows_of_every_blocked_mask(scheme, make_model, monkeypatch):
    model = make_model(scheme, strong=True)
    idx = torch.randint(0, 16, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        default = model(idx)
    calls = []
    attend = SelfAttention.attend

    def counted(self, q, *args):  # q: (B, H, Tq, Dh)
        calls.append(q.shape[-2])
        return attend(self, q, *args)

    monkeypatch.setattr(SelfAttention, "attend", counted)
    with torch.no_grad(), fixed_block_pairs(T * 100):
        got = model(idx)
    assert blocked_attention.block_pairs is None  # the device's rule again after the context
    assert calls == [100, 100, 100] * model.config.n_layers
    torch.testing.assert_close(got, default, rtol=0, atol=1e-5)


def test_sweep_times_each_budget_against_nope(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    argv = ["--device", "cpu", "--threads", "1", "--schemes", "fire", "--pairs", "15"]
    argv += ["--lengths", str(T), "--batch-tokens", str(T), "--repeats", "1", "--out", str(out)]
    assert block_sweep.main(argv) == 0
    result = json.loads(out.read_text())
    rows = result["results"]
    assert [r["name"] for r in rows] == ["none", "fire default", "fire 2^15"]
    assert [r["block_pairs"] for r in rows] == [None, None, 2**15]
    assert all(r["length"] == T and r["batch"] == 1 and r["tokens_per_s"] > 0 for r in rows)
    assert rows[0]["vs_none"] == 1.0
    assert rows[2]["vs_none"] == rows[2]["tokens_per_s"] / rows[0]["tokens_per_s"]
    printed = capsys.readouterr().out
    assert block_sweep.sweep_table(result) in printed
    assert block_sweep.ratio_table(result, T) in printed
    assert block_sweep.ratio_table(result, T).splitlines()[2].split() == [
        "|",
        "fire",
        "|",
        f"{rows[1]['vs_none']:.2f}",
        "|",
        f"{rows[2]['vs_none']:.2f}",
        "|",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pairs", "19,41"], "--pairs='19,41': each power of two must lie in [0, 40]"),
        (["--pairs", "2^19"], "must be comma-separated lists of integers"),
        (["--lengths", "0"], "--lengths='0' needs values >= 1"),
        (["--lengths", "4096,256"], "every length must exceed 256; shorter sequences are"),
        (["--schemes", ""], "--schemes='' must name schemes other than none"),
        (["--schemes", "fire,none"], "--schemes='fire,none' must name schemes other than none"),
        (["--repeats", "0"], "--repeats='0' needs values >= 1"),
        (["--schemes", "fire,alibj"], "--schemes 'alibj' is unknown; use none, learned"),
        (["--out", "/no/such/folder/s.json"], "folder '/no/such/folder' does not exist"),
    ],
)
def test_sweep_refuses_bad_arguments_before_timing_anything(argv, message, capsys):
    assert block_sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_ctrl_c_during_a_sweep_writes_nothing(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(block_sweep, "run_sweep", interrupted)
    out = tmp_path / "sweep.json"
    assert block_sweep.main(["--out", str(out), "--threads", "1"]) == 130
    assert not out.exists()
    assert capsys.readouterr().err.strip() == f"interrupted: nothing written to {out}"
