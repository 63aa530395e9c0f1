/*
 * The run list: the tenant's runs newest first from api/runs (as
 * opencode_list_runs), a status filter, older pages by cursor, and
 * statuses changing live from api/stream (event "run": {runId, status}).
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
    var generation = 0;          /* answers to an older filter are dropped */

    function row(r) {
        var li = el("li", { class: "run" }, [
            el("a", { href: "runs/" + r.runId, class: "run-link" }, [
                el("span", { class: "run-title",
                             text: r.title || r.runId })
            ]), " ",
            el("span", { class: SMCP.statusClass(r.status),
                         text: SMCP.statusText(r.status) }),
            el("span", { class: "muted run-time",
                         text: SMCP.time(r.createdAt) })
        ]);
        li.setAttribute("data-run", r.runId);
        return li;
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
            } else {
                setStatus(rows[d.runId], d.status);
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

    load(false).then(live);
}());
