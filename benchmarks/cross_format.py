"""The cross-format table of issue 21: every fixture conversation x every request API.

For each fixture (tests/fixtures/conversations, tests/fixtures/public) and each API, the body
turnledger builds (`fit_messages` + `render_body`) is checked against that provider's own SDK
request types (tests/provider_types.py: the openai and anthropic packages, dev extra); the
table says whether it is accepted and what was left out. ``--before`` checks the plain
converters instead (``to_openai_chat`` and siblings without fitting: the bodies before issue 21).

    python -m benchmarks.cross_format [--before]
"""

from __future__ import annotations

import argparse
import collections
import sys

import turnledger as tl
from tests.conversation_fixtures import IMPORTERS, conversations
from tests.provider_types import problems
from turnledger.domain.bodies import APIS, fit_messages, render_body

SHORT = {"openai_chat": "OpenAI Chat", "openai_responses": "Responses", "anthropic": "Anthropic"}


def cell(fmt: str, raw: object, api: str, before: bool) -> str:
    messages = tl.to_chat_messages(IMPORTERS[fmt](raw))
    if before:
        found = problems(api, render_body(messages, api))
        return "accepted" if not found else f"REFUSED ({len(found)})"
    sent, left_out = fit_messages(messages, api)
    found = problems(api, render_body(sent, api))
    status = "accepted" if not found else f"REFUSED ({len(found)})"
    if not left_out:
        return status
    kinds = collections.Counter(entry.what for entry in left_out)
    shown = ", ".join(f"{n}x {what}" if n > 1 else what for what, n in kinds.most_common(3))
    more = f" +{len(kinds) - 3} kinds" if len(kinds) > 3 else ""
    return f"{status}; left out {shown}{more}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", action="store_true",
                        help="the plain converters, without fitting (the bodies before issue 21)")
    args = parser.parse_args(argv)
    print("| fixture | " + " | ".join(SHORT[a] for a in APIS) + " |")
    print("|---|" + "---|" * len(APIS))
    refused = 0
    for name, fmt, raw in conversations():
        cells = [cell(fmt, raw, api, args.before) for api in APIS]
        refused += sum(c.startswith("REFUSED") for c in cells)
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n{refused} of {len(conversations()) * len(APIS)} bodies refused by the SDK types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
