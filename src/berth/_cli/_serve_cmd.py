"""`berth serve`: the inbox, a web page and JSON API where people answer parked runs (the app is `berth._serve`)."""

from __future__ import annotations

import os

import click

from berth._cli._app import CONTEXT, cli
from berth._cli._failures import bad_usage
from berth._cli._settings import Settings, user_name
from berth._errors import where


@cli.command("serve", context_settings=CONTEXT)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8470, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option(
    "--identity",
    "identities",
    multiple=True,
    metavar="NAME",
    help="Serve this identity (repeat for several, each its own section; default: BERTH_IDENTITY or default).",
)
@click.option(
    "--trusted-header",
    default=None,
    metavar="NAME",
    help="Take the person from this request header, set by an authenticating proxy (e.g. X-Forwarded-User).",
)
@click.option(
    "--forwarded-allow-ips",
    default=None,
    metavar="IPS",
    help=(
        "Proxies (addresses or networks, comma-separated) whose X-Forwarded-For/-Proto and --trusted-header "
        "are believed; default none. Required with --trusted-header."
    ),
)
@click.option(
    "--poll",
    default=3.0,
    show_default=True,
    type=click.FloatRange(0.2, 3600),
    help="Seconds between live page updates.",
)
@click.option(
    "--notify-url",
    default=None,
    envvar="BERTH_NOTIFY_URL",
    metavar="URL",
    help=(
        "POST a signed notice here when a question is asked, nears its deadline or is answered "
        "(env BERTH_NOTIFY_URL; the secret: BERTH_NOTIFY_SECRET)."
    ),
)
@click.option(
    "--notify-inbox-url",
    default=None,
    envvar="BERTH_NOTIFY_INBOX_URL",
    metavar="URL",
    help="This inbox's public URL, linked from each notice (env BERTH_NOTIFY_INBOX_URL).",
)
@click.option("--notify-no-prompt", is_flag=True, help="Leave the prompt (customer data) out of notices.")
@click.option(
    "--notify-every",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    help="Seconds between looks for new questions and near deadlines.",
)
@click.option(
    "--notify-warn-before",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0),
    metavar="MINUTES",
    help="Warn this long before an unanswered question's deadline (0: never).",
)
@click.pass_obj
def serve_cmd(
    settings: Settings,
    host: str,
    port: int,
    identities: tuple[str, ...],
    trusted_header: str | None,
    forwarded_allow_ips: str | None,
    poll: float,
    notify_url: str | None,
    notify_inbox_url: str | None,
    notify_no_prompt: bool,
    notify_every: float,
    notify_warn_before: float,
) -> None:
    """Serve the inbox: a web page and JSON API where people answer parked runs.

    Shows the open questions of the store the settings name (BERTH_URL, BERTH_IDENTITY,
    BERTH_KEYRING or BERTH_KMS, or `berth --url URL --keyring PATH serve`), newest first,
    with an answer form each; the same as JSON at /api/questions and /api/answers (schema:
    /api/openapi.json), parked runs' headers at /api/runs, Prometheus metrics at /metrics,
    liveness at /health. Never shows sealed state.
    Logs one audit line per answer (who, which key and question) to stderr. SIGINT or SIGTERM
    stops it gracefully: requests in flight finish (up to 10 s), then the stores close.

    \b
    Authentication (never optional off loopback; once set, required on loopback too):
      BERTH_SERVE_TOKEN=TOKEN             one token: API `Authorization: Bearer TOKEN`, page login form
      BERTH_SERVE_TOKEN=alice:T1,bob:T2   one token per person: answers are recorded as that person
      --trusted-header X-Forwarded-User   the person is what the authenticating proxy puts there
        --forwarded-allow-ips 10.0.0.5    (required with it: only that proxy's header is believed)
    Without either, it listens on loopback only and records answers as your user name.

    \b
    Notifications (docs/notifications.md):
      BERTH_NOTIFY_URL=https://hooks.slack.com/...  where to POST (Slack's incoming webhooks take it as is)
      BERTH_NOTIFY_SECRET=SECRET          signs each body (HMAC-SHA256, header Berth-Signature)
    Announces questions that appear while it runs, warns before deadlines, tells of answers given here.

    \b
    Example:
      berth serve
      BERTH_KEYRING=keys.json berth serve --identity pr-bot --identity support
      BERTH_SERVE_TOKEN=alice:$(openssl rand -hex 24) berth serve --host 0.0.0.0
    """
    from berth import _serve  # the app's own imports (starlette, uvicorn, jinja2) wait for build_app

    try:
        auth = _serve.Auth(
            tokens=_serve.parse_tokens(os.environ.get("BERTH_SERVE_TOKEN")),
            trusted_header=trusted_header,
            forwarded_allow_ips=forwarded_allow_ips,
            local_person=user_name(),
        )
        auth.check_bind(host)
        _serve.check_port(host, port)
    except (_serve.AuthError, _serve.ServeError) as exc:
        bad_usage(str(exc))
    hook = None
    if notify_url:
        from datetime import timedelta

        import berth
        from berth._notify import DEADLINE_NEAR, EVENTS

        if not os.environ.get("BERTH_NOTIFY_SECRET"):
            bad_usage("--notify-url needs BERTH_NOTIFY_SECRET, the secret to sign notices with: openssl rand -hex 32")
        events = [e for e in EVENTS if notify_warn_before or e != DEADLINE_NEAR]
        try:
            hook = berth.Webhook(
                notify_url,
                secret=os.environ.get("BERTH_NOTIFY_SECRET") or "",
                inbox_url=notify_inbox_url,
                include_prompt=not notify_no_prompt,
                events=events,
                warn_before=timedelta(minutes=notify_warn_before),
            )
        except berth.BerthError as exc:
            bad_usage(f"--notify-url: {exc}")
    settings.create = True  # the inbox may be the first to use a store, as a host's first park is
    names = list(dict.fromkeys(identities)) or [settings.who]
    sources = []
    for name in names:
        one = settings.for_identity(name)
        sources.append(_serve.Source(name, one.open(keys=False), one.questions(notify=hook)))
    try:
        app = _serve.build_app(sources, auth, poll_seconds=poll, notify=hook, notify_every=notify_every)
    except ImportError as exc:
        bad_usage(f"berth serve needs the serve extra: pip install 'berthing[serve]' ({exc})")
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"berth inbox for {', '.join(where(n) for n in names)} on http://{shown}:{port}/", err=True)
    try:
        _serve.run(app, host=host, port=port)
    except _serve.ServeError as exc:
        bad_usage(str(exc))
