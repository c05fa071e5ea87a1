"""`sglang serve [flags]` and `sglang export-gguf OUT_DIR`: the console entry points.

`sglang serve --help` lists every flag with its default; a mistyped flag gets serve's own usage and
the nearest real flag ("did you mean --port?"); a bad value or a model path that cannot work gets
one line saying so, with no traceback.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import List, Optional

from sglang.srt.server_args import ServerArgs


class _DefaultsFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help when it has a default worth stating."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or action.option_strings == []
        ):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> "tuple[argparse.ArgumentParser, argparse.ArgumentParser]":
    parser = argparse.ArgumentParser(
        prog="sglang", description="A radix-cache LLM serving runtime."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,export-gguf}")
    serve = sub.add_parser(
        "serve",
        help="Run the HTTP server (native /generate and OpenAI-compatible routes).",
        description="Run the HTTP server. With no --model-path it serves the embedded SmolLM2-135M-Instruct.",
        formatter_class=_DefaultsFormatter,
        usage="sglang serve [--model-path PATH] [--host HOST] [--port PORT] [FLAG ...]  (--help lists every flag)",
    )
    ServerArgs.add_cli_args(serve)
    export = sub.add_parser(
        "export-gguf",
        help="Write a GGUF model (default: the embedded SmolLM2) as an HF folder that --model-path can serve.",
        formatter_class=_DefaultsFormatter,
    )
    export.add_argument(
        "output_dir", help="Folder to write config.json, model.safetensors and the tokenizer to."
    )
    export.add_argument(
        "--model-path", default=None, help="A .gguf file; default: the embedded SmolLM2."
    )
    return parser, serve


def main(argv: Optional[List[str]] = None) -> None:
    parser, serve = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "export-gguf":
        if extra:
            parser.error("unrecognized arguments: " + " ".join(extra))
        _export(args)
        return
    if extra:
        serve.error(_unknown_flags_message(serve, extra))
    try:
        server_args = ServerArgs.from_cli_args(args)
    except ValueError as e:
        serve.exit(2, f"sglang serve: {e}\n")
    from sglang.srt.entrypoints.http_launch import launch_server

    try:
        launch_server(server_args)
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        sys.stderr.write(f"sglang serve: {e}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


def _export(args: argparse.Namespace) -> None:
    from sglang.srt.model_loader.gguf_export import export_gguf
    from sglang.srt.utils.embedded_model import embedded_model_path

    try:
        out = export_gguf(args.model_path or embedded_model_path(), args.output_dir)
    except (ValueError, FileNotFoundError, OSError) as e:
        sys.stderr.write(f"sglang export-gguf: {e}\n")
        sys.exit(1)
    print(f"Wrote {out}; serve it with: sglang serve --model-path {out}")


def _unknown_flags_message(serve: argparse.ArgumentParser, extra: List[str]) -> str:
    known = [s for a in serve._actions for s in a.option_strings if s.startswith("--")]
    parts = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        close = (
            difflib.get_close_matches(flag, known, n=1, cutoff=0.6) if flag.startswith("-") else []
        )
        parts.append(f"{arg} (did you mean {close[0]}?)" if close else arg)
    return "unrecognized arguments: " + " ".join(parts)


if __name__ == "__main__":
    main()
