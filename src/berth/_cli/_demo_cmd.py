"""`berth demo`: the whole job in seconds (the narration itself is `berth._cli._demo`)."""

from __future__ import annotations

import click

from berth._cli._app import CONTEXT, cli
from berth._cli._failures import bad_usage, refuse


@cli.command("demo", context_settings=CONTEXT)
@click.option(
    "--url",
    "demo_url",
    default=None,
    metavar="URL",
    help="Run on this store (default: a fresh SQLite file in a temporary directory).",
)
@click.option("--keep", is_flag=True, help="Keep the temporary directory and print where it is.")
def demo_cmd(demo_url: str | None, keep: bool) -> None:
    """The whole job in seconds: park, answer, race, tamper, expire.

    Exit 0 only if every step behaved as stated.

    \b
    Example:
      berth demo
    """
    from berth._cli._demo import DemoError, run_demo

    try:
        ok = run_demo(url=demo_url, keep=keep)
    except DemoError as exc:
        bad_usage(str(exc))
    if not ok:
        refuse("demo: a step did not behave as stated (see above)")
