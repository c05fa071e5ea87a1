"""Every usage example in the README runs, against a real server, so the README cannot drift.

The bash and python blocks after the two install commands are run as they are written, with the
server's port put in for 30000 and a temporary folder for /tmp paths. A block preceded by
`<!-- readme-test: skip (reason) -->` is left out (the ones that start another server).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List, Tuple

import pytest
import torch

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
_BLOCK = re.compile(r"(<!-- readme-test: skip[^>]*-->\s*\n)?```(bash|python)\n(.*?)```", re.S)


def readme_examples() -> List[Tuple[str, str]]:
    blocks = [
        (m.group(2), m.group(3), bool(m.group(1))) for m in _BLOCK.finditer(open(README).read())
    ]
    install, examples = blocks[:2], blocks[2:]
    assert [lang for lang, _, _ in install] == ["bash", "bash"] and "pytest" in install[1][1]
    return [(lang, code) for lang, code, skip in examples if not skip]


EXAMPLES = readme_examples()


def _run(lang: str, code: str, url: str, tmp: str) -> subprocess.CompletedProcess:
    port = url.rsplit(":", 1)[1]
    code = code.replace("30000", port).replace("/tmp/", tmp + "/")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if lang == "bash":
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    else:
        path = os.path.join(tmp, "example.py")
        with open(path, "w") as f:
            f.write(code)
        cmd = [sys.executable, path]  # as a file: the way a newcomer saves and runs it
    return subprocess.run(
        cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def test_the_readme_has_the_examples_a_newcomer_needs():
    text = "\n".join(code for _, code in EXAMPLES)
    for needed in (
        "/generate",
        "openai.OpenAI",
        "Engine()",
        'if __name__ == "__main__":',
        "sgl.function",
    ):
        assert needed in text, needed
    assert "temperature=0" in text.split("sgl.function", 1)[1]


@pytest.mark.parametrize(
    "lang,code", EXAMPLES, ids=[f"{i}-{lang}" for i, (lang, _) in enumerate(EXAMPLES)]
)
def test_readme_example_runs(lang, code, server_url, tmp_path, smollm_path, hf_models):
    r = _run(lang, code, server_url, str(tmp_path))
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    out = r.stdout
    assert out.strip(), r.stderr[-2000:]
    assert '"object":"error"' not in out.replace(" ", ""), out[:2000]
    if "/generate" in code and "stream" not in code:
        assert "Paris" in out
    if "stream" in code:
        assert out.rstrip().endswith("data: [DONE]")
    if "openai.OpenAI" in code or "Engine()" in code or "sgl.function" in code:
        assert "Paris" in out, out
    if "prompt_break" in code:
        assert "'cause': 'diverged'" in out and "'after': '7710" in out, out
    if "tool_choice" in code:
        assert out.startswith("tool_calls get_weather"), out
    if "export-gguf" in code:
        _check_exported_folder(str(tmp_path / "smollm2-hf"), smollm_path, hf_models)


def _check_exported_folder(folder: str, gguf: str, hf_models) -> None:
    """The exported HF folder is the same model: transformers' logits from it match the GGUF's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    ref = hf_models(gguf)
    with torch.no_grad():
        got = model(ids).logits
        want = ref(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
