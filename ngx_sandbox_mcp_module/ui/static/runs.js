/*
 * The run list: the tenant's runs newest first from api/runs (as
 * opencode_list_runs), a status filter, older pages by cursor, and
 * statuses changing live from api/stream (event "run": {runId, status}).
 * Each row: title, status, repository (owner/name), branch, how long it
 * took (or has taken so far, ticking) and, once it ended, its cost.  Above
 * it a form starts a new run (POST api/runs, opencode_run_task's
 * arguments), offering the repositories the link grants (api/grants).
 */
"use strict";

(function () {

    var el = SMCP.el;
    var PAGE = 20;
    var RUN_ID = /^run_[0-9a-f]{24}$/;

    var base = window.location.pathname.replace(/\/*$/, "/");
    var cursor = null;
    var filter = "";
    var rows = {};               /* runId -> its <li> */
    var runs = {};               /* runId -> its run, as last read */
    var generation = 0;          /* answers to an older filter are dropped */

    /* "owner/name" of a repository's URL (its last two path segments) */
    function repoName(url) {
        var m;

        if (typeof url !== "string" || url === "") {
            return "";
        }
        m = /^[a-z][a-z0-9+.-]*:\/\/[^\/]+\/(.+?)(?:\.git)?\/*$/i.exec(url);
        return m ? m[1].split("/").slice(-2).join("/") : url;
    }

    /* from its creation to its end, or to now while it goes */
    function took(r) {
        var from = Date.parse(r.createdAt);
        var to = r.finishedAt ? Date.parse(r.finishedAt) : Date.now();

        return isNaN(from) || isNaN(to) ? "" : SMCP.duration(to - from);
    }

    function row(r) {
        var meta = el("span", { class: "run-meta muted" }), name, li;

        name = repoName(r.repository);
        if (name) {
            meta.appendChild(el("span", { class: "run-repo", title:
                                          r.repository, text: name }));
        }
        if (typeof r.branch === "string" && r.branch) {
            meta.appendChild(el("span", { class: "run-branch",
                                          title: "branch",
                                          text: r.branch }));
        }
        meta.appendChild(el("span", { class: "run-duration",
                                      text: took(r) }));
        if (typeof r.cost === "number" && isFinite(r.cost)
            && SMCP.isTerminal(r.status))
        {
            meta.appendChild(el("span", { class: "run-cost",
                                          text: "$" + r.cost.toFixed(4) }));
        }

        li = el("li", { class: "run" }, [
            el("a", { href: "runs/" + r.runId, class: "run-link" }, [
                el("span", { class: "run-title",
                             text: r.title || r.runId })
            ]), " ",
            el("span", { class: SMCP.statusClass(r.status),
                         text: SMCP.statusText(r.status) }),
            meta,
            el("span", { class: "muted run-time",
                         text: SMCP.time(r.createdAt) })
        ]);
        li.setAttribute("data-run", r.runId);
        runs[r.runId] = r;
        return li;
    }

    /* the durations of the runs still going, each second */
    function tick() {
        var id, d;

        for (id in rows) {
            if (Object.prototype.hasOwnProperty.call(rows, id)
                && runs[id] && !runs[id].finishedAt)
            {
                d = rows[id].querySelector(".run-duration");
                if (d && d.textContent !== took(runs[id])) {
                    d.textContent = took(runs[id]);
                }
            }
        }
    }

    /* a run that ended: its row again, with its end and cost */
    function refresh(id) {
        SMCP.fetchJson(base + "runs/" + id + "/data").then(function (r) {
            var li = rows[id];

            if (!li || !r || r.runId !== id) {
                return;
            }
            rows[id] = row(r);
            li.replaceWith(rows[id]);
        }, function () {});
    }

    function setStatus(li, st) {
        var b = li.querySelector(".badge");
        b.className = SMCP.statusClass(st);
        b.textContent = SMCP.statusText(st);
    }

    function show(list, append) {
        var ul = document.getElementById("runs"), i, r;

        if (!append) {
            SMCP.clear(ul);
            rows = {};
            runs = {};
        }
        for (i = 0; i < list.length; i++) {
            r = list[i];
            if (!r || typeof r.runId !== "string" || !RUN_ID.test(r.runId)
                || rows[r.runId])
            {
                continue;
            }
            rows[r.runId] = row(r);
            ul.appendChild(rows[r.runId]);
        }
        document.getElementById("empty").hidden = !!ul.firstChild;
    }

    function load(append) {
        var g = ++generation, url;

        url = base + "api/runs?limit=" + PAGE
              + (filter ? "&status=" + encodeURIComponent(filter) : "")
              + (append && cursor ? "&cursor=" + encodeURIComponent(cursor)
                 : "");
        return SMCP.fetchJson(url).then(function (d) {
            if (g !== generation) {
                return;
            }
            cursor = typeof d.nextCursor === "string" ? d.nextCursor : null;
            show(Array.isArray(d.runs) ? d.runs : [], append);
            document.getElementById("more").hidden = !cursor;
        }, function (e) {
            SMCP.showError(e.message);
        });
    }

    /* a run the list does not show yet: its row, newest first */
    function added(id, st) {
        var ul = document.getElementById("runs");

        if (filter && st !== filter) {
            return;
        }
        SMCP.fetchJson(base + "runs/" + id + "/data").then(function (r) {
            if (rows[id] || (filter && r.status !== filter)) {
                return;
            }
            rows[id] = row(r);
            ul.insertBefore(rows[id], ul.firstChild);
            document.getElementById("empty").hidden = true;
        }, function () {});
    }

    function live() {
        var source = new EventSource(base + "api/stream");
        var opened = 0;

        source.addEventListener("run", function (m) {
            var d;
            try {
                d = JSON.parse(m.data);
            } catch (e) {
                return;
            }
            if (!d || typeof d.runId !== "string" || !RUN_ID.test(d.runId)
                || typeof d.status !== "string")
            {
                return;
            }
            if (!rows[d.runId]) {
                added(d.runId, d.status);
            } else if (filter && d.status !== filter) {
                rows[d.runId].remove();
                delete rows[d.runId];
                delete runs[d.runId];
            } else {
                setStatus(rows[d.runId], d.status);
                runs[d.runId].status = d.status;
                if (SMCP.isTerminal(d.status)) {
                    refresh(d.runId);
                }
            }
        });
        source.addEventListener("open", function () {
            SMCP.setText("live", "Live: statuses change as runs progress.");
            /* what changed while the stream was away: the list again */
            if (opened++) {
                load(false);
            }
        });
        source.addEventListener("error", function () {
            SMCP.setText("live", source.readyState === EventSource.CLOSED
                         ? "Not live: reload the page to retry."
                         : "Reconnecting…");
        });
    }

    /* -- a new run ------------------------------------------------------ */

    /* the form, once the link's grants are known: exact ones offered as
     * URLs on the server's git host (repositoryBase), every one named in
     * the hint */
    function grants(g) {
        var list = document.getElementById("new-repos"), i, r, at;

        r = g && Array.isArray(g.repositories) ? g.repositories : [];
        at = g && typeof g.repositoryBase === "string"
             && /^https:\/\/[A-Za-z0-9.-]+(:[0-9]+)?\/$/.test(g.repositoryBase)
             ? g.repositoryBase : null;
        for (i = 0; at && i < r.length && i < 100; i++) {
            if (typeof r[i] === "string" && /^[\w.-]+\/[\w.-]+$/.test(r[i])) {
                list.appendChild(el("option", { value: at + r[i] }));
            }
        }
        SMCP.setText("new-grants", r.length === 0
            ? "This link grants no repository: a run without one only."
            : "This link may name: " + r.slice(0, 20).join(", ")
              + (r.length > 20 ? ", …" : "") + ".");
        document.getElementById("new-box").hidden = false;
    }

    function field(id) {
        return document.getElementById(id).value.trim();
    }

    function start(e) {
        var args = {}, b = document.getElementById("new-send");

        e.preventDefault();
        args.task = document.getElementById("new-task").value;
        if (!/\S/.test(args.task)) {
            SMCP.setText("new-note", "Write the task first.");
            return;
        }
        if (field("new-repo") !== "") {
            args.repository = field("new-repo");
        }
        if (field("new-branch") !== "") {
            args.branch = field("new-branch");
        }
        if (field("new-model") !== "") {
            args.model = field("new-model");
        }
        if (document.getElementById("new-pr").checked) {
            args.createPullRequest = true;
        }
        b.disabled = true;
        SMCP.startRun(base + "api/runs", args, "new-note", function (id) {
            return base + "runs/" + id;
        }).then(null, function () {
            b.disabled = false;
        });
    }

    document.getElementById("new-run").addEventListener("submit", start);
    SMCP.fetchJson(base + "api/grants").then(grants, function () {
        /* no form: the list stands alone */
    });

    document.getElementById("status-filter").addEventListener("change",
        function (e) {
            filter = e.target.value;
            cursor = null;
            load(false);
        });
    document.getElementById("filter").addEventListener("submit",
        function (e) {
            e.preventDefault();
        });
    document.getElementById("more").addEventListener("click", function () {
        load(true);
    });

    setInterval(tick, 1000);
    load(false).then(live);
}());
