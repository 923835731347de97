"""The example position scheme of docs/extending.md (the README's "Extending" points to it) runs
as written: a newcomer's first code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_readme_scheme_example_trains_and_evaluates(tmp_path: Path) -> None:
    assert "docs/extending.md#a-position-scheme" in (ROOT / "README.md").read_text()
    guide = (ROOT / "docs" / "extending.md").read_text()
    section = guide[guide.index("## A position scheme") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert '@register("myscheme")' in code
    (tmp_path / "myscheme.py").write_text(code)
    # A fresh process, so the example's registration does not leak into other tests.
    script = f"""
import sys, torch
sys.path[:0] = [{str(ROOT)!r}, {str(tmp_path)!r}]
import myscheme  # registers it
from model import ModelConfig, Transformer
torch.manual_seed(0)
config = ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, d_ff=32,
                     position="myscheme")
model = Transformer(config)
tokens = torch.randint(0, 11, (2, 9))
logits = model(tokens)
logits.sum().backward()
assert logits.shape == (2, 9, 11) and torch.isfinite(logits).all()
assert model.position.gain.grad is not None and model.position.gain.grad.abs().sum() > 0
# the bias reaches the scores, on the default path and on the long-sequence blocked path
import dataclasses
import model.blocked_attention as blocked
assert model.position.shared_bias  # declared by overriding score_bias, nothing else
long = torch.randint(0, 11, (2, 37))
with torch.no_grad():
    whole = model(long)
    blocked.BLOCK_ROWS, blocked.BLOCK_PAIRS = 5, 80
    assert torch.allclose(model(long), whole, rtol=0, atol=1e-5)
    model.position.options = dataclasses.replace(model.position.options, slope=5.0)
    assert not torch.allclose(model(long), whole, atol=1e-3)
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
