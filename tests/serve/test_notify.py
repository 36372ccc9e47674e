"""`berth serve --notify-url`: the inbox tells a real receiver on 127.0.0.1 of new questions, near deadlines
and answers, and counts it on /metrics."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

import berth
from tests._net import free_port, wait_http
from tests._receiver import Receiver

BERTH = Path(sys.executable).parent / "berth"
SECRET = "notify-" + secrets.token_hex(16)


def test_serve_announces_new_questions_near_deadlines_and_answers(tmp_path: Path) -> None:
    keyring = tmp_path / "keys.json"
    berth.Keyring.generate().save(keyring)
    url = f"sqlite:///{tmp_path}/berth.db"
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    soon = datetime.now(timezone.utc) + timedelta(minutes=20)
    store = berth.open_store(url, identity="ops", sealer=sealer)
    questions = berth.open_questions(url, identity="ops", sealer=sealer)
    coordinator = berth.Coordinator(store, questions)
    coordinator.suspend("old/1", berth.Envelope(provider="p", provider_state={}, run_id="r0", deadline=soon), "Old?")
    token = secrets.token_urlsafe(32)
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")} | {
        "BERTH_URL": url,
        "BERTH_IDENTITY": "ops",
        "BERTH_KEYRING": str(keyring),
        "BERTH_SERVE_TOKEN": "carol:" + token,
        "BERTH_NOTIFY_SECRET": SECRET,
    }
    with Receiver(SECRET).start() as receiver, store, questions:
        environ["BERTH_NOTIFY_URL"] = receiver.url
        command = [str(BERTH), "serve", "--port", str(port), "--notify-every", "0.5"]
        command += ["--notify-inbox-url", "https://inbox.example/", "--notify-no-prompt"]
        proc = subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            base = f"http://127.0.0.1:{port}"
            assert wait_http(base + "/health"), "berth serve did not start"
            assert receiver.wait_for(1)  # the open question is not announced; its near deadline is
            parked = berth.Envelope(provider="p", provider_state={}, run_id="r1")
            envelope = coordinator.suspend("new/2", parked, "New?")
            assert receiver.wait_for(2)
            auth = {"Authorization": "Bearer " + token}
            answer = {"identity": "ops", "key": "new/2", "question_id": envelope.labels["berth.question"], "text": "ok"}
            assert httpx.post(base + "/api/answers", json=answer, headers=auth).status_code == 201
            assert receiver.wait_for(3)
            metrics = httpx.get(base + "/metrics", headers=auth).text
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
    assert proc.returncode in (0, -signal.SIGTERM), err
    notices = [(r.payload["berth"]["event"], r.payload["berth"]["key"]) for r in receiver.got]
    assert notices == [
        ("question.deadline_near", "old/1"),
        ("question.asked", "new/2"),
        ("question.answered", "new/2"),
    ]
    assert all(r.valid for r in receiver.got)
    assert all(b"Old?" not in r.body and b"New?" not in r.body for r in receiver.got)  # --notify-no-prompt
    assert receiver.got[1].payload["berth"]["url"] == "https://inbox.example/?identity=ops&prefix=new%2F2"
    assert 'berth_notifications_total{event="question.asked"} 1' in metrics
    assert "berth_notifications_dropped_total 0" in metrics
    assert SECRET not in out + err


def test_serve_refuses_a_notify_url_without_a_secret(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")} | {
        "BERTH_URL": f"sqlite:///{tmp_path}/berth.db",
        "BERTH_NOTIFY_URL": "https://hooks.example.com/x",
    }
    done = subprocess.run(
        [str(BERTH), "serve", "--port", str(free_port())], env=environ, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "BERTH_NOTIFY_SECRET" in done.stderr
    environ |= {"BERTH_NOTIFY_SECRET": SECRET, "BERTH_NOTIFY_URL": "http://hooks.example.com/x"}
    done = subprocess.run(
        [str(BERTH), "serve", "--port", str(free_port())], env=environ, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "must use https" in done.stderr
