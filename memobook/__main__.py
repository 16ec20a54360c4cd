"""``python -m memobook chapters [NAME ...] [--json]`` lists the chapters in reading order;
``python -m memobook digest`` prints the environment's digest (CI caches under it)."""

from __future__ import annotations

import argparse
import json
import sys

import memobook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memobook", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("chapters", help="the chapters' paths, in reading order")
    listing.add_argument(
        "names", nargs="*", help="topics or paths to check and list (default: all)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON list of topics")
    commands.add_parser("digest", help="the digest the book's environment is built from")
    args = parser.parse_args(argv)
    if args.command == "digest":
        print(memobook.env_digest())
    elif args.json:
        print(json.dumps([c.name for c in memobook.chapters()]))
    else:
        try:
            print("\n".join(memobook.chapter_paths(args.names)))
        except KeyError as error:
            parser.error(str(error.args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
