"""The import package `sglang` is the repository root: `sglang.srt` is srt/, `sglang.lang` is lang/."""

from setuptools import find_packages, setup

subpackages = find_packages(where=".", include=["srt", "srt.*", "lang", "lang.*"])
setup(
    packages=["sglang"] + [f"sglang.{p}" for p in subpackages],
    package_dir={"sglang": "."},
    package_data={"sglang.srt": ["py.typed"]},
)
