"""Host profile of tree verify steps (cProfile over bench_speculative at one batch size): where a
tree pass's time goes when it is far slower than a chain's.

    python benchmark/profile_tree_verify.py --model-config llama3-8b --batch-size 1 --tree-breadth 4
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_speculative

if __name__ == "__main__":
    prof = cProfile.Profile()
    prof.enable()
    bench_speculative.main(sys.argv[1:] + ["--accept", "1.0", "--num-draft-tokens", "8"])
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
