"""sglang: a radix-cache LLM serving runtime.

`import sglang as sgl` gives the frontend language (gen, select, function, ...) and `sgl.Engine`.
Heavy runtime modules are imported lazily so that the frontend stays light.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "Engine":
        from sglang.srt.entrypoints.engine import Engine

        return Engine
    if name == "ServerArgs":
        from sglang.srt.server_args import ServerArgs

        return ServerArgs
    try:
        import sglang.lang.api as _api
    except ImportError as e:  # pragma: no cover - lang not built yet
        raise AttributeError(name) from e
    if hasattr(_api, name):
        return getattr(_api, name)
    raise AttributeError(f"module 'sglang' has no attribute {name!r}")
