"""`berth mcp`: an MCP server where an approver's own MCP client lists the questions waiting and answers them.

The server's two tools are the inbox's API over MCP (`berth._serve`'s `Inbox`, the same documents):
`list_questions` is `GET /api/questions`, `answer_question` is `POST /api/answers`, bound the same way
to the question shown (its `question_id`: a superseded, already answered or expired question is
refused, never answered in its place). Over stdio the person answering is `--by` (default: your user
name); over streamable HTTP (`--http HOST:PORT`) authentication is `berth serve`'s (`BERTH_SERVE_TOKEN`
bearer tokens or `--trusted-header`, never optional off loopback) and the person is the one the
credentials name.
"""

from __future__ import annotations

import os

import click

from berth._cli._app import CONTEXT, cli
from berth._cli._failures import bad_usage
from berth._cli._settings import Settings, user_name
from berth._errors import where

__all__ = ["mcp_cmd"]


@cli.command("mcp", context_settings=CONTEXT)
@click.option("--http", "http", default=None, metavar="HOST:PORT", help="Serve streamable HTTP here (default: stdio).")
@click.option("--by", default=None, metavar="NAME", help="Over stdio: who answers (default: your user name).")
@click.option(
    "--trusted-header",
    default=None,
    metavar="NAME",
    help="Over HTTP: take the person from this request header, set by an authenticating proxy.",
)
@click.option(
    "--forwarded-allow-ips",
    default=None,
    metavar="IPS",
    help="Over HTTP: proxies whose --trusted-header is believed (required with it).",
)
@click.pass_obj
def mcp_cmd(
    settings: Settings, http: str | None, by: str | None, trusted_header: str | None, forwarded_allow_ips: str | None
) -> None:
    """Serve the questions to approvers' own MCP clients.

    Two tools: list_questions (what parked runs wait on, with each tool call's name and
    arguments) and answer_question (bound to the question_id shown, as the inbox's answers are).

    \b
    Authentication over HTTP is `berth serve`'s (never optional off loopback):
      BERTH_SERVE_TOKEN=alice:T1,bob:T2   bearer tokens; answers are recorded as that person
      --trusted-header X-Forwarded-User --forwarded-allow-ips 10.0.0.5

    \b
    Example:
      berth mcp                                   # stdio: add it to your MCP client's servers
      BERTH_SERVE_TOKEN=alice:$(openssl rand -hex 24) berth mcp --http 127.0.0.1:8471
    """
    from berth import _serve

    try:
        from berth._cli._mcp_server import build_server, guard, person_of
    except ImportError as exc:
        bad_usage(f"berth mcp needs the mcp extra: pip install 'berthing[mcp]' ({exc})")
    host, port = "", 0
    if http is not None:
        host, sep, port_text = http.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            bad_usage(f"--http takes HOST:PORT (e.g. 127.0.0.1:8471), got {http!r}")
        host, port = host.strip("[]"), int(port_text)
    elif trusted_header or forwarded_allow_ips:
        bad_usage("--trusted-header and --forwarded-allow-ips are for --http")
    try:
        auth = _serve.Auth(
            tokens=_serve.parse_tokens(os.environ.get("BERTH_SERVE_TOKEN")) if http else {},
            trusted_header=trusted_header,
            forwarded_allow_ips=forwarded_allow_ips,
            local_person=by or user_name(),
        )
        if http:
            auth.check_bind(host)
            _serve.check_port(host, port)
    except (_serve.AuthError, _serve.ServeError) as exc:
        bad_usage(str(exc))
    settings.create = True  # a server may be the first to use a store, as `berth serve` may
    source = _serve.Source(settings.who, settings.open(keys=False), settings.questions())
    inbox = _serve.Inbox([source], max_age=0)
    local = auth.local_person
    server = build_server(inbox, settings.who, lambda ctx: person_of(ctx, local))
    try:
        if http is None:
            click.echo(f"berth mcp for {where(settings.who)} on stdio, answering as {local}", err=True)
            server.run("stdio")
            return
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"berth mcp for {where(settings.who)} on http://{shown}:{port}/mcp", err=True)
        _serve.run(guard(server.streamable_http_app(), auth), host=host, port=port)
    finally:
        inbox.close()
