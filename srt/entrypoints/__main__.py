from sglang.srt.entrypoints.cli import main

main()
