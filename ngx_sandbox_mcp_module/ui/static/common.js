/*
 * Shared helpers of the dashboard pages.
 *
 * Everything shown comes from the run's data, which the agent and the
 * tenant wrote: it only ever becomes text (textContent, createTextNode),
 * never markup, and a link only when it is http(s).
 */
"use strict";

var SMCP = (function () {

    var TERMINAL = { completed: 1, failed: 1, cancelled: 1 };

    /* el("p", {class: "x", hidden: true}, ["text", node]): an element */
    function el(tag, attrs, children) {
        var e = document.createElement(tag), k, i, c;

        attrs = attrs || {};
        for (k in attrs) {
            if (!Object.prototype.hasOwnProperty.call(attrs, k)
                || attrs[k] === null || attrs[k] === undefined
                || attrs[k] === false)
            {
                continue;
            }
            if (k === "text") {
                e.textContent = String(attrs[k]);
            } else if (k === "class") {
                e.className = attrs[k];
            } else {
                e.setAttribute(k, attrs[k] === true ? "" : String(attrs[k]));
            }
        }

        children = children || [];
        for (i = 0; i < children.length; i++) {
            c = children[i];
            if (c === null || c === undefined) {
                continue;
            }
            e.appendChild(typeof c === "object" ? c
                          : document.createTextNode(String(c)));
        }
        return e;
    }

    function clear(e) {
        while (e.firstChild) {
            e.removeChild(e.firstChild);
        }
    }

    function setText(id, s) {
        var e = document.getElementById(id);
        if (e) {
            e.textContent = s === null || s === undefined ? "" : String(s);
        }
        return e;
    }

    /* an http(s) address, else null: never javascript: or data: */
    function safeUrl(s) {
        var u;
        if (typeof s !== "string" || s.length > 2048) {
            return null;
        }
        try {
            u = new URL(s);
        } catch (e) {
            return null;
        }
        return u.protocol === "https:" || u.protocol === "http:" ? u.href
               : null;
    }

    /* a text cut to n characters, saying how much was left out */
    function cut(s, n) {
        s = s === null || s === undefined ? "" : String(s);
        if (s.length <= n) {
            return s;
        }
        return s.slice(0, n) + "\n[… " + (s.length - n)
               + " more characters not shown]";
    }

    function time(iso) {
        var d = iso ? new Date(iso) : null;
        if (!d || isNaN(d.getTime())) {
            return "";
        }
        return d.toLocaleString();
    }

    function duration(ms) {
        var s, m, h;
        if (!(ms >= 0)) {
            return "";
        }
        s = Math.floor(ms / 1000);
        h = Math.floor(s / 3600);
        m = Math.floor(s % 3600 / 60);
        s = s % 60;
        return (h ? h + " h " : "") + (h || m ? m + " min " : "") + s + " s";
    }

    function statusText(st) {
        return typeof st === "string" && st ? st : "unknown";
    }

    /* the status badge's class: one of a known set */
    function statusClass(st) {
        return "badge st-" + (/^(started|running|completed|failed|cancelled)$/
                              .test(st) ? st : "unknown");
    }

    function isTerminal(st) {
        return TERMINAL[st] === 1;
    }

    /*
     * GET or POST, same origin, JSON back; rejects with the server's
     * message ({"error": text}: a 401's says how to get a new link)
     */
    function fetchJson(url, opts) {
        opts = opts || {};
        return fetch(url, {
            method: opts.method || "GET",
            credentials: "same-origin",
            cache: "no-store",
            headers: opts.headers || { "Accept": "application/json" },
            body: opts.body
        }).then(function (r) {
            if (r.ok) {
                return r.json();
            }
            return r.json().then(function (j) {
                return j && typeof j.error === "string" ? j.error : "";
            }, function () {
                return "";
            }).then(function (msg) {
                throw new Error(msg ? cut(msg, 1000)
                                : r.status === 401
                                ? "This link is not valid any more: reload "
                                  + "the page to see how to get a new one."
                                : "The server answered " + r.status + ".");
            });
        });
    }

    /* the page's own address without a token (the server moved it) */
    function dropToken() {
        var u = new URL(window.location.href);
        if (u.searchParams.has("token")) {
            u.searchParams.delete("token");
            window.history.replaceState(null, "", u.pathname + u.search
                                        + u.hash);
        }
    }

    /* a POST of the dashboard's own: JSON, with the CSRF header the server
     * asks for (a form or a simple cross-site request cannot send it) */
    function postJson(url, body) {
        return fetchJson(url, {
            method: "POST",
            headers: { "Accept": "application/json", "X-SMCP-CSRF": "1",
                       "Content-Type": "application/json" },
            body: JSON.stringify(body)
        });
    }

    /* POST api/runs (apiUrl) with opencode_run_task's arguments: the new
     * run's page (runUrl(runId)) opens, else element note says why */
    function startRun(apiUrl, args, note, runUrl) {
        setText(note, "Starting…");
        return postJson(apiUrl, args).then(function (r) {
            if (!r || typeof r.runId !== "string"
                || !/^run_[0-9a-f]{24}$/.test(r.runId))
            {
                throw new Error("no run in the answer");
            }
            setText(note, "Started: opening it…");
            window.location.assign(runUrl(r.runId));
        }).then(null, function (err) {
            setText(note, "Not started: " + err.message);
            throw err;
        });
    }

    function showError(msg) {
        var e = document.getElementById("load-error");
        if (e) {
            e.textContent = msg;
            e.hidden = false;
        }
    }

    return {
        el: el, clear: clear, setText: setText, safeUrl: safeUrl, cut: cut,
        time: time, duration: duration, statusText: statusText,
        statusClass: statusClass, isTerminal: isTerminal,
        fetchJson: fetchJson, postJson: postJson, startRun: startRun,
        dropToken: dropToken, showError: showError
    };
}());

SMCP.dropToken();
