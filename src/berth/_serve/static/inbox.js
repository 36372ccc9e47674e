// berth inbox: live updates, relative times, keyboard. No dependencies, no build; the page works without it.
(function () {
  "use strict";

  var body = document.body;
  var pollMs = parseInt(body.getAttribute("data-poll-ms") || "0", 10);
  var liveUrl = body.getAttribute("data-live");
  var etag = null;
  var paused = false;

  function span(seconds) {  // as the server and the command line write it: 45s, 12m, 3h 5m, 13d 23h
    var s = Math.floor(Math.abs(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) {
      var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
      return m ? h + "h " + m + "m" : h + "h";
    }
    var d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600);
    return hh ? d + "d " + hh + "h" : d + "d";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach(function (t) {
      t.textContent = span((now - Date.parse(t.getAttribute("datetime"))) / 1000) + " ago";
    });
    document.querySelectorAll("time[data-countdown]").forEach(function (t) {
      var left = (Date.parse(t.getAttribute("datetime")) - now) / 1000;
      t.textContent = left >= 0 ? span(left) + " left" : "expired " + span(left) + " ago";
      t.classList.toggle("late", left < 3600);
    });
  }

  // A card someone is writing in is never replaced under their hands: it is marked stale instead,
  // and sending it shows the new question (the server refuses an answer to a superseded one).
  function dirty(card) {
    return Array.prototype.some.call(card.querySelectorAll("textarea"), function (text) {
      return text.value !== text.defaultValue || document.activeElement === text;
    });
  }

  function merge(html) {
    var doc = new DOMParser().parseFromString("<div>" + html + "</div>", "text/html");
    var fresh = doc.body.firstElementChild;
    ["summary", "pager", "recent"].forEach(function (id) {
      var mine = document.getElementById(id), theirs = fresh.querySelector("#" + id);
      if (mine && theirs) mine.replaceWith(document.importNode(theirs, true));
      else if (theirs) document.getElementById("live").appendChild(document.importNode(theirs, true));
      else if (mine) mine.remove();
    });
    var cards = document.getElementById("cards"), incoming = fresh.querySelector("#cards");
    if (!cards || !incoming) return;
    var keep = [];
    Array.prototype.forEach.call(incoming.children, function (card) {
      var mine = document.getElementById(card.id);
      if (mine && mine.getAttribute("data-version") === card.getAttribute("data-version")) {
        keep.push(mine);
      } else if (mine && dirty(mine)) {
        var note = mine.querySelector(".stale");
        if (note) note.hidden = false;
        mine.classList.add("is-stale");
        keep.push(mine);
      } else {
        var node = document.importNode(card, true);
        if (!mine) node.classList.add("arrived");
        keep.push(node);
      }
    });
    Array.prototype.forEach.call(cards.children, function (mine) {
      if (keep.indexOf(mine) < 0 && dirty(mine)) {
        var note = mine.querySelector(".stale");
        if (note) note.hidden = false;
        mine.classList.add("is-stale");
        keep.push(mine);
      }
    });
    var focused = document.activeElement;
    keep.forEach(function (node) { cards.appendChild(node); });
    Array.prototype.slice.call(cards.children).forEach(function (node) {
      if (keep.indexOf(node) < 0) node.remove();
    });
    if (focused && document.contains(focused)) focused.focus({ preventScroll: true });
    tick();
  }

  function poll() {
    if (paused || document.hidden || !liveUrl) return schedule();
    var headers = { Accept: "text/html" };
    if (etag) headers["If-None-Match"] = etag;
    fetch(liveUrl + window.location.search, { credentials: "same-origin", headers: headers, cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { sessionEnded(); return null; }
        if (r.status === 304 || !r.ok) return null;
        etag = r.headers.get("ETag");
        return r.text();
      })
      .then(function (html) { if (html !== null && html !== undefined) merge(html); })
      .catch(function () { /* offline for a moment: try again next time */ })
      .then(schedule);
  }

  // The session ended (a restart, the 12-hour expiry, a log-out elsewhere). Nobody typing: reload,
  // which leads to the login. Someone typing: keep what they typed, stop polling, and say what happens.
  function sessionEnded() {
    var typing = Array.prototype.some.call(document.querySelectorAll("#cards .card"), dirty);
    if (!typing) { window.location.reload(); return; }
    paused = true;
    if (document.getElementById("session-ended")) return;
    var note = document.createElement("div");
    note.id = "session-ended";
    note.className = "notice error";
    note.setAttribute("role", "alert");
    note.textContent = "Your session has ended. Sending asks you to log in again; what you typed is kept and " +
      "filled in again afterwards. Nothing is recorded until you send it then.";
    var live = document.getElementById("live");
    live.parentNode.insertBefore(note, live);
  }

  var timer = null;
  function schedule() {
    if (pollMs > 0) { clearTimeout(timer); timer = setTimeout(poll, pollMs); }
  }

  // --- keyboard -------------------------------------------------------------------------------
  function cardsList() { return Array.prototype.slice.call(document.querySelectorAll("#cards .card")); }

  function move(step) {
    var all = cardsList();
    if (!all.length) return;
    var at = all.indexOf(document.activeElement && document.activeElement.closest(".card"));
    var next = all[Math.min(all.length - 1, Math.max(0, at < 0 ? 0 : at + step))];
    next.focus();
    next.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", function (e) {
    var t = e.target, typing = t && (t.tagName === "TEXTAREA" || t.tagName === "INPUT" || t.tagName === "SELECT");
    if (typing) {
      if (t.tagName === "TEXTAREA" && e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        // sends a free-text answer or an edit; a decision (approve, reject) is always a click of its own
        var send = t.form.querySelector("button[value=respond]") || t.form.querySelector("button[value=edit]");
        if (send) send.click();
      } else if (e.key === "Escape") {
        t.blur();
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "j") { e.preventDefault(); move(1); }
    else if (e.key === "k") { e.preventDefault(); move(-1); }
    else if (e.key === "/") { var p = document.getElementById("prefix"); if (p) { e.preventDefault(); p.focus(); } }
    else if (e.key === "a") {
      var card = (document.activeElement && document.activeElement.closest(".card")) || cardsList()[0];
      var area = card && card.querySelector("textarea");
      if (area) { e.preventDefault(); area.focus(); }
    }
  });

  // What was typed is kept in this tab until the server has seen it: when the session ended
  // meanwhile, the login leads back here (?lost=1) and the answer is filled in again, never sent
  // on its own (the person checks it and sends it).
  var DRAFT = "berth.draft";
  function saveDraft(form, button) {
    var card = form.closest(".card");
    var values = {};
    form.querySelectorAll("textarea").forEach(function (t) { values[t.name] = t.value; });
    try {
      sessionStorage.setItem(DRAFT, JSON.stringify({
        card: card ? card.id : "", question: (form.querySelector("input[name=question_id]") || {}).value || "",
        values: values, edit: form.classList.contains("edit-form"), search: window.location.search
      }));
    } catch (err) { /* storage disabled: the page still says nothing was recorded */ }
  }
  function restoreDraft(notice) {
    var draft = null;
    try { draft = JSON.parse(sessionStorage.getItem(DRAFT) || "null"); } catch (err) { draft = null; }
    if (!draft || !draft.values) return;
    var card = draft.card && document.getElementById(draft.card);
    var form = card && card.querySelector(draft.edit ? "form.edit-form" : "form.answer");
    var same = form && form.querySelector("input[name=question_id]").value === draft.question;
    var lost = notice.getAttribute("data-lost") === "stale" ? "stale" : "1";
    if (!card && draft.search && window.location.search !== draft.search + "&lost=" + lost) {
      window.location.replace("/" + (draft.search || "?") + "&lost=" + lost);  // the view the answer was typed in
      return;
    }
    var note = document.createElement("p");
    note.className = "restored";
    if (same) {
      Object.keys(draft.values).forEach(function (name) {
        var t = form.querySelector("textarea[name='" + name.replace(/[^a-z0-9_]/gi, "") + "']");
        if (t) t.value = draft.values[name];
      });
      var details = form.closest("details");
      if (details) details.open = true;
      note.textContent = "Your answer is filled in again below: check it and send it.";
      card.scrollIntoView({ block: "center" });
      var first = form.querySelector("textarea");
      if (first) first.focus({ preventScroll: true });
    } else {
      note.textContent = "The question you answered is no longer open as you saw it. What you typed:";
      Object.keys(draft.values).forEach(function (name) {
        var kept = document.createElement("textarea");
        kept.readOnly = true; kept.value = draft.values[name]; kept.className = "kept";
        note.appendChild(kept);
      });
    }
    notice.appendChild(note);
    sessionStorage.removeItem(DRAFT);
  }

  // Submitting a form whose question changed still goes to the server, which refuses and shows it.
  document.addEventListener("submit", function (e) {
    var button = e.submitter;
    if (button && button.form && button.form.classList.contains("answer")) {
      saveDraft(button.form, button);
      button.form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
      if (button.name) {
        var hidden = document.createElement("input");
        hidden.type = "hidden"; hidden.name = button.name; hidden.value = button.value;
        button.form.appendChild(hidden);
      }
    }
  });

  window.berthInbox = { pause: function () { paused = true; }, resume: function () { paused = false; poll(); } };
  // A refusal is where the eye and the keyboard should land: it says what changed.
  var notice = document.getElementById("notice");
  if (notice && notice.hasAttribute("data-lost")) {
    restoreDraft(notice);
  } else if (notice) {
    try { sessionStorage.removeItem(DRAFT); } catch (err) { /* nothing kept */ }
  }
  if (notice && notice.classList.contains("error") && document.activeElement.tagName !== "TEXTAREA") {
    notice.setAttribute("tabindex", "-1");
    notice.focus();
  }
  tick();
  setInterval(tick, 1000);
  schedule();
})();
