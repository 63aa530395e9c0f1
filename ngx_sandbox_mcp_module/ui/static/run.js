/*
 * The run page: the run's facts from runs/{id}/data, its steps live from
 * runs/{id}/events (server-sent events: the types and data of
 * opencode_get_events), its diff from runs/{id}/diff once it has ended,
 * a Cancel button (pressed twice: the second press confirms) and a box
 * for a message to the agent while it is started or running
 * (opencode_send_message).  The status leads the tab's title, so a
 * background tab tells how the run is going; a button asks the browser
 * for notifications (only when pressed, never on load), and then the
 * run's end is told by one.
 *
 * While the run goes, the page follows the timeline's newest step as long
 * as the reader is at its end; scrolled away, it stays put and offers a
 * button back to it.  The files the agent's tools wrote so far show in the
 * summary until the run ends and its diff takes over.
 *
 * Only links that open with the page's own link are shown: data says
 * "access": "tenant" (the tenant's link: "All runs" and the session's
 * other runs) or "run" (a watchUrl: this run only; its cookie does not
 * reach other pages, and the server sends nothing of the session).
 */
"use strict";

(function () {

    var el = SMCP.el;

    var MAX_TEXT = 20000;        /* characters of one output shown */
    var MAX_EVENTS = 5000;       /* timeline entries kept on the page */
    var MAX_DIFF_PAGES = 16;     /* 64 KiB pages of a diff fetched */
    var MAX_DIFF_LINES = 4000;   /* lines of one file's diff shown */
    var MAX_TAB_TITLE = 80;      /* characters of the title in the tab */
    var MAX_FILES_NOW = 30;      /* files changed so far named */
    var LONG_LINES = 3;          /* a command longer than this is folded */
    var LONG_CHARS = 300;
    var CONFIRM_MS = 5000;       /* Cancel waits this long for its second
                                    press */
    var QUIET_MS = 300;          /* the stored steps are in once the stream
                                    is this quiet */
    var END_SLACK = 24;          /* px: the timeline's end still "in view" */
    var END_GAP = 8;             /* px kept under the newest step */

    /* the agent's tools that write a file (input.filePath) */
    var FILE_TOOLS = { write: 1, edit: 1, multiedit: 1 };

    /* the status at the head of the tab's title: told apart by sign too */
    var MARKS = { started: "○", running: "●", completed: "✓", failed: "✗",
                  cancelled: "⊘" };

    var base = window.location.pathname.replace(/\/+$/, "");
    var runId = base.slice(base.lastIndexOf("/") + 1);

    var run = null;              /* the last data answer */
    var seen = {};               /* event ids on the page */
    var shown = 0;
    var usage = { input: 0, output: 0, reasoning: 0, cacheRead: 0,
                  cacheWrite: 0, cost: 0 };
    var source = null;
    var diffLoaded = false;
    var cancelAsked = false;
    var confirmTimer = null;     /* Cancel pressed once: waits for the
                                    second press */
    var filesNow = [];           /* the files the agent's tools wrote */
    var filesSeen = Object.create(null);
    var notifyAsked = false;     /* the button was pressed */
    var notified = false;        /* the run's end was told */
    var copyTimer = null;        /* clears the copy button's note */

    /* following the timeline's newest step */
    var follow = {
        primed: false,           /* the stored steps are in */
        on: false,               /* the reader is at the timeline's end */
        quiet: null,             /* the timer that primes it */
        frame: 0,                /* a settle() is due */
        before: 0,               /* the end's place before the new steps */
        height: 0,               /* the timeline's height before them */
        y: 0                     /* the last scroll position seen */
    };
    /* the browser keeps what is on the screen in place when content
       above it grows (scroll anchoring): without it, the page does */
    var anchors = !!(window.CSS && CSS.supports
                     && CSS.supports("overflow-anchor", "auto"));

    function num(v) {
        return typeof v === "number" && isFinite(v) && v >= 0 ? v : 0;
    }

    function isLive(st) {
        return st === "started" || st === "running";
    }

    /* -- the run's facts ------------------------------------------------ */

    function fact(dl, name, value) {
        if (value === null || value === undefined || value === "") {
            return;
        }
        dl.appendChild(el("div", {}, [el("dt", { text: name }),
                                      el("dd", { text: value })]));
    }

    function showStatus(st) {
        var s = document.getElementById("status");
        if (s.textContent !== SMCP.statusText(st)) {
            s.textContent = SMCP.statusText(st);
        }
        s.className = SMCP.statusClass(st);
        showCancel(st);
        showSteer(st);
        showTabTitle(st);
        showNotify(st);
        showFilesNow();
        if (!isLive(st)) {
            follow.on = false;
        }
        showToNewest();
    }

    /* "● running" */
    function markedStatus(st) {
        return (MARKS[st] || "?") + " " + SMCP.statusText(st);
    }

    /* the run's title (the tenant's text), at most MAX_TAB_TITLE long */
    function shortName() {
        var name = String((run && (run.title || run.runId)) || "Run");

        return name.length > MAX_TAB_TITLE
               ? name.slice(0, MAX_TAB_TITLE) + "…" : name;
    }

    /* "● running — Fix the login bug — sandbox-mcp" */
    function showTabTitle(st) {
        document.title = markedStatus(st) + " — " + shortName()
                         + " — sandbox-mcp";
    }

    function showCancel(st) {
        var box = document.getElementById("cancel-box");
        var live = isLive(st);

        if (!live) {
            keepRunning();
        }
        box.hidden = !live;
        document.getElementById("cancel").hidden = !live;
        document.getElementById("cancel").disabled =
            cancelAsked || (run && run.cancelRequested === true);
        if (!live) {
            SMCP.setText("cancel-note", "");
        } else if (run && run.cancelRequested === true) {
            SMCP.setText("cancel-note", "Cancel requested: stopping the "
                         + "agent…");
        }
    }

    /* the tenant's link only: a run's watchUrl watches; a live run is
     * steered, an ended one's session continued */
    function showSteer(st) {
        var tenant = run !== null && run.access === "tenant";

        document.getElementById("steer-box").hidden = !isLive(st) || !tenant;
        document.getElementById("followup-box").hidden =
            !SMCP.isTerminal(st) || !tenant || typeof run.sessionId !== "string"
            || run.sessionId === "";
    }

    /* -- told when it ends (the Notifications API) ------------------------ */

    function canNotify() {
        return "Notification" in window
               && Notification.permission !== "denied";
    }

    function showNotify(st) {
        var live = isLive(st);

        document.getElementById("notify-box").hidden =
            !(live && canNotify()) && !notifyAsked;
        document.getElementById("notify").hidden = notifyAsked;
        /* told once the outcome is on the page: a status event comes
           first, the run's data (finishedAt, result, error) after it */
        if (!live && notifyAsked && !notified && run && run.finishedAt
            && Notification.permission === "granted")
        {
            notified = true;
            tellEnd(st);
        }
    }

    /* "✓ completed — Fix the login bug", and the result's first line */
    function tellEnd(st) {
        var body = String(run.error || run.result || run.diffStat || "");

        try {
            new Notification(markedStatus(st) + " — " + shortName(),
                             { body: body.split("\n")[0].slice(0, 200),
                               tag: String(run.runId) });
        } catch (e) {
            SMCP.setText("notify-note", "The browser did not show the "
                         + "notification.");
        }
    }

    function askNotify() {
        notifyAsked = true;
        showNotify(run && run.status);
        SMCP.setText("notify-note", "Asking the browser…");
        Notification.requestPermission().then(function (p) {
            SMCP.setText("notify-note", p === "granted"
                         ? "You will be told when this run ends."
                         : "The browser does not allow notifications for "
                           + "this page.");
            showNotify(run && run.status);
        });
    }

    function tick() {
        var from, to;
        if (!run) {
            return;
        }
        from = Date.parse(run.startedAt || run.createdAt);
        to = run.finishedAt ? Date.parse(run.finishedAt) : Date.now();
        SMCP.setText("elapsed", isNaN(from) || isNaN(to) ? ""
                     : (run.finishedAt ? "took "
                        : run.status === "started" ? "waiting for "
                        : "running for ")
                       + SMCP.duration(to - from));
    }

    function showUsage() {
        var dl = document.getElementById("usage"), t, u;

        t = run && run.tokens;
        /* the stored outcome once the run ended, else the steps so far */
        u = t && SMCP.isTerminal(run.status)
            ? { input: num(t.input), output: num(t.output),
                reasoning: num(t.reasoning), cacheRead: num(t.cacheRead),
                cacheWrite: num(t.cacheWrite), cost: num(run.cost) }
            : usage;

        SMCP.clear(dl);
        fact(dl, "Input tokens", String(u.input));
        fact(dl, "Output tokens", String(u.output));
        if (u.reasoning) {
            fact(dl, "Reasoning tokens", String(u.reasoning));
        }
        if (u.cacheRead || u.cacheWrite) {
            fact(dl, "Cache read / write", u.cacheRead + " / "
                 + u.cacheWrite);
        }
        fact(dl, "Cost", "$" + u.cost.toFixed(4)
             + (run && typeof run.maxCostUsd === "number"
                ? " of at most $" + run.maxCostUsd : ""));
        /* what the egress metered of the provider's answers: the cap's */
        if (run && typeof run.meteredCostUsd === "number"
            && run.meteredCostUsd > 0)
        {
            fact(dl, "Metered at the egress",
                 "$" + run.meteredCostUsd.toFixed(4));
        }
    }

    function showRun(r) {
        var dl = document.getElementById("facts"), pr, url, res, err;

        run = r;
        SMCP.setText("title", r.title || r.runId || "Run");
        showStatus(r.status);
        tick();

        SMCP.clear(dl);
        fact(dl, "Run", r.runId);
        fact(dl, "Repository", r.repository);
        fact(dl, "Branch", r.branch);
        fact(dl, "Model", r.model);
        fact(dl, "Created", SMCP.time(r.createdAt));
        fact(dl, "Started", SMCP.time(r.startedAt));
        fact(dl, "Finished", SMCP.time(r.finishedAt));
        if (r.exitCode !== null && r.exitCode !== undefined) {
            fact(dl, "Exit code", String(r.exitCode));
        }
        SMCP.setText("task", SMCP.cut(r.task, MAX_TEXT));
        showUsage();

        res = document.getElementById("result-box");
        res.hidden = !(r.result || r.error || r.pullRequestUrl);
        SMCP.setText("result", SMCP.cut(r.result, 4 * MAX_TEXT));
        err = SMCP.setText("run-error", r.error);
        err.hidden = !r.error;

        pr = document.getElementById("pr");
        SMCP.clear(pr);
        url = SMCP.safeUrl(r.pullRequestUrl);
        pr.hidden = !url;
        if (url) {
            pr.appendChild(el("a", { href: url, rel: "noopener noreferrer",
                                     text: "Pull request: " + url }));
        }

        showSessionId(r.sessionId);
        showAttempts(r);
        document.getElementById("all-runs").hidden = r.access !== "tenant";
        showSession(r.access === "tenant" ? r.sessionRuns : null,
                    r.access === "tenant");

        if (SMCP.isTerminal(r.status) && !diffLoaded) {
            diffLoaded = true;
            loadDiff(r);
        }
    }

    /* a group's attempts side by side (opencode_run_task attempts): each
     * its status, diffStat, cost and pull request, a link to its page
     * (the tenant's link only; a run's link is told their number and
     * status) */
    function showAttempts(r) {
        var ol = document.getElementById("attempts"), list, i, a, li, dl,
            href, url, head;

        list = Array.isArray(r.attempts) ? r.attempts : [];
        SMCP.clear(ol);
        for (i = 0; i < list.length; i++) {
            a = list[i];
            if (!a || typeof a.runId !== "string"
                || !/^run_[0-9a-f]{24}$/.test(a.runId))
            {
                continue;
            }
            href = r.access === "tenant" ? a.runId : null;
            head = "Attempt " + (i + 1);
            li = el("li", a.runId === runId ? { "aria-current": "page" } : {},
                    [el("strong", { text: a.runId === runId
                                          ? head + " (this one)" : head }),
                     " ",
                     el("span", { class: SMCP.statusClass(a.status),
                                  text: SMCP.statusText(a.status) })]);
            /* a run's link is told the others' number and status only */
            dl = el("dl", { class: "facts" });
            if ("diffStat" in a) {
                fact(dl, "Changes", a.diffStat || (SMCP.isTerminal(a.status)
                                                   ? "none" : "not yet"));
            }
            fact(dl, "Cost", typeof a.cost === "number"
                             ? "$" + a.cost.toFixed(4) : "");
            li.appendChild(dl);
            url = SMCP.safeUrl(a.pullRequestUrl);
            if (url) {
                li.appendChild(el("p", {}, [el("a", {
                    href: url, rel: "noopener noreferrer",
                    text: "Pull request" })]));
            }
            if (href && a.runId !== runId) {
                li.appendChild(el("p", {}, [el("a", {
                    href: href + "#diff-h", text: "Open its changes" })]));
            }
            ol.appendChild(li);
        }
        document.getElementById("attempts-box").hidden = !ol.firstChild;
    }

    /* the session's other runs (the tenant's link), or with a run's link
     * how to reach them */
    function showSession(list, tenant) {
        var ul = document.getElementById("session-runs"), i, o;

        list = Array.isArray(list) ? list : [];
        SMCP.clear(ul);
        for (i = 0; i < list.length; i++) {
            o = list[i];
            if (!o || typeof o.runId !== "string"
                || !/^run_[0-9a-f]{24}$/.test(o.runId)
                || o.runId === runId)
            {
                continue;
            }
            ul.appendChild(el("li", {}, [
                el("a", { href: o.runId, text: o.title || o.runId }), " ",
                el("span", { class: SMCP.statusClass(o.status),
                             text: SMCP.statusText(o.status) }), " ",
                el("span", { class: "muted", text: SMCP.time(o.createdAt) })
            ]));
        }
        document.getElementById("run-only").hidden = tenant;
        document.getElementById("session-box").hidden = tenant
                                                        && !ul.firstChild;
    }

    /* -- the session id: shown, selectable, copied by a button ----------- */

    function showSessionId(id) {
        var code = document.getElementById("session-id");

        id = typeof id === "string" ? id.slice(0, 200) : "";
        if (code.textContent !== id) {
            code.textContent = id;
        }
        document.getElementById("session-line").hidden = !id;
    }

    function copyNote(text) {
        SMCP.setText("copy-note", text);
        clearTimeout(copyTimer);
        copyTimer = setTimeout(function () {
            SMCP.setText("copy-note", "");
        }, 8000);
    }

    /* without the Clipboard API (or its permission): the id selected */
    function selectSessionId() {
        var range = document.createRange(), sel = window.getSelection();

        range.selectNodeContents(document.getElementById("session-id"));
        sel.removeAllRanges();
        sel.addRange(range);
        copyNote("The id is selected: copy it (Ctrl+C, ⌘C or the menu).");
    }

    function copySessionId() {
        var id = document.getElementById("session-id").textContent;

        if (!id) {
            return;
        }
        if (!navigator.clipboard
            || typeof navigator.clipboard.writeText !== "function")
        {
            selectSessionId();
            return;
        }
        navigator.clipboard.writeText(id).then(function () {
            copyNote("Copied.");
        }, selectSessionId);
    }

    function load() {
        return SMCP.fetchJson(base + "/data").then(showRun, function (e) {
            SMCP.showError(e.message);
        });
    }

    /* -- the timeline ---------------------------------------------------- */

    function folded(label, text) {
        return el("details", {}, [el("summary", { text: label }),
                                  el("pre", { class: "text",
                                              text: SMCP.cut(text,
                                                             MAX_TEXT) })]);
    }

    function str(v) {
        if (v === null || v === undefined) {
            return "";
        }
        return typeof v === "string" ? v : JSON.stringify(v, null, 2);
    }

    /* the one line that says what a tool call is about */
    function toolArg(input) {
        var keys = ["command", "filePath", "path", "pattern", "url", "query",
                    "description"], i;

        if (!input || typeof input !== "object") {
            return "";
        }
        for (i = 0; i < keys.length; i++) {
            if (typeof input[keys[i]] === "string" && input[keys[i]]) {
                return input[keys[i]];
            }
        }
        return "";
    }

    /* a title that only repeats the command (or its start) */
    function repeats(what, arg) {
        what = what.trim();
        return what !== "" && arg.trim().indexOf(what) === 0;
    }

    /*
     * What a tool call is (its title, else its description) when it says
     * more than the command: the command itself is shown once, below.
     */
    function toolWhat(st, arg) {
        var input = st.input && typeof st.input === "object" ? st.input : {};
        var names = [st.title, input.description], i, w;

        for (i = 0; i < names.length; i++) {
            w = typeof names[i] === "string" ? names[i] : "";
            if (w && !(arg && repeats(w, arg))) {
                return w;
            }
        }
        return "";
    }

    /* a command: as it is, or folded under its first line when long */
    function command(arg) {
        var lines = arg.split("\n"), first = lines[0];
        var pre = el("pre", { class: "cmd", text: SMCP.cut(arg, MAX_TEXT) });

        if (lines.length <= LONG_LINES && arg.length <= LONG_CHARS) {
            return pre;
        }
        return el("details", { class: "cmd-fold" }, [
            el("summary", {}, [
                el("code", { class: "cmd-first",
                             text: first.length > 120
                                   ? first.slice(0, 120) + "…" : first }),
                " ", el("span", { class: "muted",
                                  text: "(" + (lines.length > 1
                                        ? lines.length + " lines"
                                        : arg.length + " characters")
                                        + ")" })
            ]), pre
        ]);
    }

    /* -- the files changed so far (the agent's write and edit calls) ----- */

    /* a path in the sandbox as the diff names it: in the repository */
    function repoPath(p) {
        return p.replace(/^\/workspace\/repo\//, "")
                .replace(/^\/workspace\//, "");
    }

    function fileChanged(part, st) {
        var p = st.input && st.input.filePath;

        if (FILE_TOOLS[part.tool] !== 1 || typeof p !== "string" || !p
            || st.status === "error" || st.error)
        {
            return;
        }
        p = repoPath(p);
        if (filesSeen[p] === 1) {
            return;
        }
        filesSeen[p] = 1;
        filesNow.push(p);
        showFilesNow();
    }

    /* "Files changed so far: a, b" while the run goes; then the diff */
    function showFilesNow() {
        var list = document.getElementById("files-now-list"), i, n;

        document.getElementById("files-now").hidden =
            !(run && isLive(run.status) && filesNow.length);
        n = Math.min(filesNow.length, MAX_FILES_NOW);
        SMCP.clear(list);
        for (i = 0; i < n; i++) {
            list.appendChild(el("code", { class: "path",
                                          text: filesNow[i] }));
            if (i + 1 < n) {
                list.appendChild(document.createTextNode(", "));
            }
        }
        if (filesNow.length > n) {
            list.appendChild(document.createTextNode(" and "
                + (filesNow.length - n) + " more"));
        }
    }

    function agentEntry(d, li) {
        var part = d.part || {}, st = part.state || {}, e, msg, arg;

        switch (d.type) {
        case "tool_use":
            li.className += " tool";
            arg = toolArg(st.input);
            li.appendChild(el("p", {}, [
                el("span", { class: "kind", text: part.tool || "tool" }),
                " ", el("span", { class: "what", text: toolWhat(st, arg) })
            ]));
            if (arg) {
                li.appendChild(command(arg));
            }
            fileChanged(part, st);
            if (st.output !== undefined && st.output !== "") {
                li.appendChild(folded("Output", str(st.output)));
            }
            if (st.status === "error" || st.error) {
                li.appendChild(el("p", { class: "error",
                                         text: SMCP.cut(str(st.error
                                               || "the tool failed"),
                                               MAX_TEXT) }));
            }
            return;

        case "text":
            li.className += " reply";
            li.appendChild(el("pre", { class: "text",
                                       text: SMCP.cut(part.text, MAX_TEXT) }));
            return;

        case "reasoning":
            li.appendChild(folded("Thinking", str(part.text)));
            return;

        case "step_start":
            li.className += " minor";
            li.appendChild(el("p", { class: "muted", text: "Step started" }));
            return;

        case "step_finish":
            li.className += " minor";
            e = part.tokens || {};
            li.appendChild(el("p", { class: "muted", text: "Step done: "
                + num(e.input) + " in, " + num(e.output) + " out, $"
                + num(part.cost).toFixed(4) }));
            count(part);
            return;

        case "error":
            e = d.error || {};
            msg = (e.data && e.data.message) || e.message || e.name
                  || "the agent reported an error";
            li.className += " failed";
            li.appendChild(el("p", { class: "error",
                                     text: "Error: " + SMCP.cut(str(msg),
                                                                MAX_TEXT) }));
            return;

        default:
            li.appendChild(folded(String(d.type || "agent event"), str(d)));
        }
    }

    /* the tokens and cost of a step, counted as the runner counts them */
    function count(part) {
        var t = part.tokens || {}, c = t.cache || {}, cost = part.cost;
        var n = [t.input, t.output, t.reasoning, c.read, c.write], i;

        for (i = 0; i < n.length; i++) {
            if (n[i] === undefined) {
                n[i] = 0;
            }
            if (typeof n[i] !== "number" || n[i] < 0 || n[i] > 1e9
                || Math.floor(n[i]) !== n[i])
            {
                return;
            }
        }
        if (cost === undefined) {
            cost = 0;
        }
        if (typeof cost !== "number" || !(cost >= 0 && cost <= 1000)) {
            return;
        }
        usage.input += n[0];
        usage.output += n[1];
        usage.reasoning += n[2];
        usage.cacheRead += n[3];
        usage.cacheWrite += n[4];
        usage.cost += cost;
        showUsage();
    }

    function lifecycleEntry(d, li) {
        var words;

        li.className += " minor";
        if (typeof d.status === "string") {
            li.appendChild(el("p", {}, ["Status: ",
                el("span", { class: SMCP.statusClass(d.status),
                             text: SMCP.statusText(d.status) })]));
            return;
        }
        if (d.type === "smcp") {
            words = { clone: "Cloning the repository",
                      clone_failed: "Cloning failed",
                      agent_start: "Agent started",
                      agent_exit: "Agent exited",
                      diff: "Diff stored" };
            li.appendChild(el("p", { class: d.step === "clone_failed"
                                             ? "error" : "muted",
                text: (words[d.step] || "Step " + str(d.step))
                      + (d.message ? ": " + SMCP.cut(str(d.message), 2000)
                         : "")
                      + (typeof d.code === "number" ? " (exit code "
                         + d.code + ")" : "")
                      + (typeof d.bytes === "number" ? " (" + d.bytes
                         + " bytes)" : "") }));
            return;
        }
        if (d.warning) {
            li.appendChild(el("p", { class: "error",
                                     text: "Warning: " + str(d.warning) }));
            return;
        }
        li.appendChild(folded("Lifecycle", str(d)));
    }

    function egressEntry(d, li) {
        li.className += " minor egress";
        li.appendChild(el("p", {}, [
            el("span", { class: "kind", text: "egress" }), " ",
            el("span", { class: "mono", text: [str(d.method), str(d.route),
                str(d.path), "→", str(d.status)].join(" ") }), " ",
            el("span", { class: "muted", text: num(d.bytesOut) + " B out, "
                + num(d.bytesIn) + " B in, " + num(d.durationMs) + " ms"
                + (d.granted === false ? ", refused" : "") })
        ]));
    }

    /* a message to the agent: sent (who, how, the text), then taken */
    function messageEntry(d, li) {
        if (d.delivered === true) {
            li.className += " minor";
            li.appendChild(el("p", { class: "muted", text: "Message "
                + num(d.id) + " reached the agent" }));
            return;
        }
        li.className += " message";
        li.appendChild(el("p", {}, [
            el("span", { class: "kind", text: "message " + num(d.id) }),
            " from " + str(d.from) + (d.via === "dashboard"
                ? " (the dashboard)" : d.via === "mcp" ? " (MCP)" : "")
        ]));
        li.appendChild(el("pre", { class: "text",
                                   text: SMCP.cut(str(d.text), MAX_TEXT) }));
    }

    function addEvent(ev) {
        var ol = document.getElementById("timeline"), li, d, t;

        if (!ev || typeof ev !== "object" || typeof ev.id !== "string"
            || seen[ev.id])
        {
            return;
        }
        seen[ev.id] = 1;
        d = ev.data;
        if (typeof d === "string" && ev.type !== "log") {
            try {
                d = JSON.parse(d);
            } catch (e) {
                /* shown as a line of text below */
            }
        }

        t = Date.parse(ev.time);
        li = el("li", { class: "ev ev-" + (/^(agent|lifecycle|log|egress|message)$/
                                           .test(ev.type) ? ev.type
                                           : "other") });
        li.appendChild(el("time", { datetime: isNaN(t) ? null : ev.time,
                                    text: isNaN(t) ? ""
                                    : new Date(t).toLocaleTimeString() }));

        if (d && typeof d === "object" && ev.type === "agent") {
            agentEntry(d, li);
        } else if (d && typeof d === "object" && ev.type === "lifecycle") {
            lifecycleEntry(d, li);
            if (typeof d.status === "string") {
                statusChanged(d.status);
            }
        } else if (d && typeof d === "object" && ev.type === "egress") {
            egressEntry(d, li);
        } else if (d && typeof d === "object" && ev.type === "message") {
            messageEntry(d, li);
        } else {
            li.className += " minor";
            li.appendChild(el("pre", { class: "text log",
                                       text: SMCP.cut(str(d), MAX_TEXT) }));
        }

        growing();
        ol.appendChild(li);
        if (++shown > MAX_EVENTS) {
            ol.removeChild(ol.firstChild);
        }
        if (!follow.primed) {
            clearTimeout(follow.quiet);
            follow.quiet = setTimeout(prime, QUIET_MS);
        }
    }

    /* -- following the newest step ---------------------------------------- */

    /* where the timeline ends, from the top of the screen (px) */
    function endBottom() {
        return document.getElementById("timeline").getBoundingClientRect()
               .bottom;
    }

    /*
     * Where the end was for what the reader sees: steps added since the
     * last frame (a settle() due) left out.  A scroll's event comes with
     * the next frame: steps that came in between are not what the reader
     * scrolled to.
     */
    function endSeen() {
        var b = endBottom();

        if (follow.frame !== 0) {
            b -= document.getElementById("timeline").offsetHeight
                 - follow.height;
        }
        return b;
    }

    function atEnd() {
        var b = endSeen();
        return b >= 0 && b <= window.innerHeight + END_SLACK;
    }

    /* at once, whatever the page's scroll-behavior (a smooth scroll would
     * pass for the reader's own) */
    function scrollDown(px) {
        if (px !== 0) {
            try {
                window.scrollBy({ top: px, left: 0, behavior: "instant" });
            } catch (e) {
                window.scrollBy(0, px);     /* no "instant": an old browser */
            }
        }
        follow.y = window.scrollY;
    }

    /* the stored steps are in: from now on the page follows the newest
     * while the reader is at the end (it did not move the reader so far) */
    function prime() {
        follow.primed = true;
        follow.on = run !== null && isLive(run.status) && atEnd();
        follow.y = window.scrollY;
        showToNewest();
    }

    /* before steps are added: where the end was, and a settle() due */
    function growing() {
        if (follow.frame === 0) {
            follow.before = endBottom();
            follow.height = document.getElementById("timeline").offsetHeight;
            follow.frame = window.requestAnimationFrame(settle);
        }
    }

    /*
     * After new steps: the newest kept in view while following; else what
     * the reader reads stays where it was (below the timeline it would move
     * down, unless the browser's scroll anchoring keeps it).
     */
    function settle() {
        var b = endBottom(), bottom = window.innerHeight - END_GAP;

        follow.frame = 0;
        if (!follow.primed) {
            return;
        }
        if (follow.on && run && isLive(run.status)) {
            if (b > bottom) {
                scrollDown(b - bottom);
            }
        } else if (!anchors && follow.before < 0) {
            scrollDown(b - follow.before);
        }
        showToNewest();
    }

    /* the reader moved: up and away from the end, or down past it, stops
     * following; back at the end, it follows again */
    function scrolled() {
        var y = window.scrollY;

        if (!follow.primed) {
            follow.y = y;
            return;
        }
        /* not moved since the page's own scroll (scrollDown): not the
         * reader's move.  (Its event may come after more steps grew the
         * timeline and before settle() put what is read back: its end on
         * the screen then does not mean the reader went there.) */
        if (Math.abs(y - follow.y) <= 1) {
            return;
        }
        if (follow.on) {
            follow.on = y < follow.y - 1 ? atEnd() : endSeen() >= 0;
        } else {
            follow.on = run !== null && isLive(run.status) && atEnd();
        }
        follow.y = y;
        showToNewest();
    }

    function showToNewest() {
        var b = document.getElementById("to-newest");
        var away = follow.primed && !follow.on && run !== null
                   && isLive(run.status)
                   && document.getElementById("timeline").firstChild !== null;

        if (b.hidden === away) {
            b.hidden = !away;
            document.body.classList.toggle("away", away);
        }
    }

    /* "Back to the newest step": there, and following again */
    function toNewest() {
        var li = document.getElementById("timeline").lastElementChild;

        scrollDown(endBottom() - (window.innerHeight - END_GAP));
        follow.on = true;
        showToNewest();
        if (li) {
            li.setAttribute("tabindex", "-1");
            li.focus({ preventScroll: true });
        }
    }

    /* a status only moves forward: the replayed events repeat old ones */
    function rank(st) {
        return st === "started" ? 1 : st === "running" ? 2
               : SMCP.isTerminal(st) ? 3 : 0;
    }

    function statusChanged(st) {
        if (!run || rank(st) <= rank(run.status)) {
            return;
        }
        run.status = st;
        showStatus(st);
        /* the outcome (result, tokens, diff) is stored with the status */
        if (SMCP.isTerminal(st) || st === "running") {
            load();
        }
    }

    function live() {
        var types = ["agent", "lifecycle", "log", "egress", "message"], i;

        source = new EventSource(base + "/events");

        function onEvent(m) {
            var ev;
            try {
                ev = JSON.parse(m.data);
            } catch (e) {
                return;
            }
            addEvent(ev);
        }

        for (i = 0; i < types.length; i++) {
            source.addEventListener(types[i], onEvent);
        }
        source.addEventListener("open", function () {
            SMCP.setText("live", "Live: new steps appear as they happen.");
            if (!follow.primed && follow.quiet === null) {
                follow.quiet = setTimeout(prime, QUIET_MS);
            }
        });
        source.addEventListener("error", function () {
            if (source.readyState === EventSource.CLOSED) {
                SMCP.setText("live", "Not live: reload the page to retry.");
            } else {
                SMCP.setText("live", "Reconnecting…");
            }
        });
        source.addEventListener("end", function () {
            source.close();
            SMCP.setText("live", "The run has ended.");
            load();
        });
    }

    /* -- the diff ---------------------------------------------------------- */

    /*
     * The files of a unified diff: each section from its "diff --git"
     * line, its header lines (up to the first hunk) naming it, then its
     * hunks' lines counted by their first character.
     */
    function diffFiles(text) {
        var lines = text.split("\n"), files = [], f = null, i, l, m, c;

        if (lines[lines.length - 1] === "") {
            lines.pop();
        }
        for (i = 0; i < lines.length; i++) {
            l = lines[i];
            if (l.indexOf("diff --git ") === 0) {
                m = /^diff --git a\/(.*) b\/(.*)$/.exec(l);
                f = { name: m ? m[2] : l.slice(11), add: 0, del: 0,
                      lines: [], hunks: false };
                files.push(f);
            } else if (!f) {
                continue;
            }

            if (l.indexOf("@@") === 0) {
                f.hunks = true;
                c = "hunk";
            } else if (!f.hunks) {
                c = "meta";
                if (l.indexOf("+++ b/") === 0) {
                    f.name = l.slice(6);
                } else if (l.indexOf("rename to ") === 0) {
                    f.name = l.slice(10);
                }
            } else if (l[0] === "+") {
                f.add++;
                c = "add";
            } else if (l[0] === "-") {
                f.del++;
                c = "del";
            } else {
                c = l[0] === "\\" ? "meta" : "ctx";
            }
            f.lines.push([l, c]);
        }
        return files;
    }

    function diffLine(l) {
        return el("span", { class: "dl " + l[1], text: l[0] + "\n" });
    }

    function showDiff(text, truncated) {
        var box = document.getElementById("diff"), files, i, j, f, pre, n;

        files = diffFiles(text);
        SMCP.clear(box);
        for (i = 0; i < files.length; i++) {
            f = files[i];
            pre = el("pre", { class: "diff" });
            n = Math.min(f.lines.length, MAX_DIFF_LINES);
            for (j = 0; j < n; j++) {
                pre.appendChild(diffLine(f.lines[j]));
            }
            if (n < f.lines.length) {
                pre.appendChild(el("span", { class: "dl meta",
                    text: "[… " + (f.lines.length - n)
                          + " more lines not shown]\n" }));
            }
            box.appendChild(el("details", { class: "file", open: true }, [
                el("summary", {}, [
                    el("span", { class: "path", text: f.name }), " ",
                    el("span", { class: "add", text: "+" + f.add }), " ",
                    el("span", { class: "del", text: "−" + f.del })
                ]), pre
            ]));
        }
        if (truncated) {
            box.appendChild(el("p", { class: "muted",
                                      text: "The diff was cut short." }));
        }
        document.getElementById("diff-box").hidden = files.length === 0;
    }

    function loadDiff(r) {
        var text = "", pages = 0;

        SMCP.setText("diff-stat", r.diffStat);

        function page(cursor) {
            var url = base + "/diff"
                      + (cursor ? "?cursor=" + encodeURIComponent(cursor)
                         : "");
            return SMCP.fetchJson(url).then(function (d) {
                text += typeof d.diff === "string" ? d.diff : "";
                if (d.nextCursor && ++pages < MAX_DIFF_PAGES) {
                    return page(d.nextCursor);
                }
                showDiff(text, d.truncated === true || !!d.nextCursor);
            });
        }

        page(null).catch(function () {
            diffLoaded = false;
        });
    }

    /* -- cancel: pressed, then confirmed ---------------------------------- */

    /* the first press asks for a second within CONFIRM_MS */
    function cancelPressed() {
        var b = document.getElementById("cancel");

        if (confirmTimer !== null) {
            keepRunning();
            cancel();
            return;
        }
        b.textContent = "Confirm cancel";
        b.classList.add("confirm");
        document.getElementById("cancel-keep").hidden = false;
        SMCP.setText("cancel-note", "Press Confirm cancel within "
                     + CONFIRM_MS / 1000 + " s to stop the agent.");
        confirmTimer = setTimeout(function () {
            keepRunning();
            SMCP.setText("cancel-note", "");
        }, CONFIRM_MS);
    }

    /* back to one Cancel button, nothing asked */
    function keepRunning() {
        var b = document.getElementById("cancel");

        if (confirmTimer === null) {
            return;
        }
        clearTimeout(confirmTimer);
        confirmTimer = null;
        b.textContent = "Cancel this run";
        b.classList.remove("confirm");
        document.getElementById("cancel-keep").hidden = true;
    }

    function cancel() {
        var b = document.getElementById("cancel");

        cancelAsked = true;
        b.disabled = true;
        SMCP.setText("cancel-note", "Cancelling…");
        SMCP.fetchJson(base + "/cancel", {
            method: "POST",
            headers: { "Accept": "application/json", "X-SMCP-CSRF": "1" }
        }).then(function (r) {
            if (r && typeof r.status === "string") {
                showRun(Object.assign({}, run, r,
                                      { sessionRuns: run.sessionRuns }));
            }
            if (r && r.status === "running") {
                SMCP.setText("cancel-note", "Cancel requested: stopping the "
                             + "agent…");
            }
        }, function (e) {
            cancelAsked = false;
            b.disabled = false;
            SMCP.setText("cancel-note", "Could not cancel: " + e.message);
        });
    }

    /* -- a message to the agent --------------------------------------------- */

    function steer(e) {
        var box = document.getElementById("steer");
        var b = document.getElementById("steer-send");
        var text = box.value;

        e.preventDefault();
        if (!/\S/.test(text)) {
            SMCP.setText("steer-note", "Write a message first.");
            return;
        }
        b.disabled = true;
        SMCP.setText("steer-note", "Sending…");
        SMCP.postJson(base + "/message", { message: text }).then(function (r) {
            b.disabled = false;
            box.value = "";
            SMCP.setText("steer-note", "Sent: the agent reads it with its "
                         + "next step" + (r && r.waiting > 1 ? " ("
                         + num(r.waiting) + " waiting)" : "") + ".");
        }, function (err) {
            b.disabled = false;
            SMCP.setText("steer-note", "Not sent: " + err.message);
        });
    }

    /* -- a follow-up: a new run of the session (POST api/runs) --------- */

    function followUp(e) {
        var box = document.getElementById("followup");
        var b = document.getElementById("followup-send");
        var text = box.value;

        e.preventDefault();
        if (!/\S/.test(text)) {
            SMCP.setText("followup-note", "Write the next task first.");
            return;
        }
        b.disabled = true;
        start({ task: text, sessionId: run.sessionId }, "followup-note")
            .then(null, function () {
                b.disabled = false;
            });
    }

    /* -- the same run again, in a new session: what it was started with -- */

    function rerunArgs() {
        var a = { task: run.task }, names = ["repository", "branch", "model",
            "agent", "title", "baseBranch", "prTitle", "image"], i;

        for (i = 0; i < names.length; i++) {
            if (typeof run[names[i]] === "string" && run[names[i]] !== "") {
                a[names[i]] = run[names[i]];
            }
        }
        if (typeof run.timeoutSeconds === "number" && run.timeoutSeconds > 0) {
            a.timeoutSeconds = run.timeoutSeconds;
        }
        if (typeof run.maxCostUsd === "number" && run.maxCostUsd > 0) {
            a.maxCostUsd = run.maxCostUsd;
        }
        if (run.createPullRequest === true) {
            a.createPullRequest = true;
            if (run.draft === true) {
                a.draft = true;
            }
        }
        return a;
    }

    function rerun() {
        var b = document.getElementById("rerun");

        b.disabled = true;
        start(rerunArgs(), "rerun-note").then(null, function () {
            b.disabled = false;
        });
    }

    /* POST api/runs, then the new run's page */
    function start(args, note) {
        return SMCP.startRun(base.replace(/\/runs\/[^\/]+$/, "/api/runs"), args,
                             note, function (id) {
                                 return base.replace(/[^\/]+$/, id);
                             });
    }

    document.getElementById("steer-box").addEventListener("submit", steer);
    document.getElementById("followup-box").addEventListener("submit",
                                                             followUp);
    document.getElementById("rerun").addEventListener("click", rerun);
    document.getElementById("cancel").addEventListener("click",
                                                       cancelPressed);
    document.getElementById("cancel-keep").addEventListener("click",
        function () {
            keepRunning();
            SMCP.setText("cancel-note", "");
            document.getElementById("cancel").focus();
        });
    document.getElementById("to-newest").addEventListener("click", toNewest);
    window.addEventListener("scroll", scrolled, { passive: true });
    document.getElementById("notify").addEventListener("click", askNotify);
    document.getElementById("copy-session").addEventListener("click",
                                                             copySessionId);
    setInterval(tick, 1000);
    load().then(function () {
        if (run) {
            live();
        }
    });
}());
