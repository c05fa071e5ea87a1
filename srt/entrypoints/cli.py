"""`sglang serve [flags]`: the console entry point."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from sglang.srt.server_args import ServerArgs


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="sglang", description="A radix-cache LLM serving runtime.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="Run the HTTP server (native /generate and OpenAI-compatible routes).")
    ServerArgs.add_cli_args(serve)
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            server_args = ServerArgs.from_cli_args(args)
        except ValueError as e:
            parser.exit(2, f"sglang serve: {e}\n")
        from sglang.srt.entrypoints.http_server import launch_server

        try:
            launch_server(server_args)
        except (ValueError, RuntimeError) as e:
            sys.stderr.write(f"sglang serve: {e}\n")
            sys.exit(1)


if __name__ == "__main__":
    main()
