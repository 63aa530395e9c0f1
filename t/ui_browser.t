#!/usr/bin/perl
# The dashboard in real headless Chromium against nginx with the module and
# Redis: a watchUrl opened while its run is fed events the way the runner
# stores them (t/js/lib/runner.mjs: XADD + PUBLISH, the runner's own
# running.lua and finish.lua) — the address bar loses the token, the
# timeline grows without reload, the status turns running then completed,
# tokens and cost add up, the result, PR link, diff and session runs
# render; nginx reloaded under a watched run (the page reconnects and
# resumes, missing and repeating nothing); Cancel (clicked on a running
# run, by keyboard on a started one); XSS in every field the agent or the
# tenant writes; the run list (order, cursor paging, status filter, live
# statuses, across a reload, a new run at the top, links); 390 px without
# sideways scrolling (long unbroken words too), dark mode; a tampered
# link's 401 page; no request leaving the origin.  Issue 23, 11: the page
# works for whoever holds its link (a watchUrl shows no link it cannot
# open: not All runs, not the session's other runs, and says how to reach
# them; the tenant's link shows both and they open), the session id shown
# and copied (Clipboard API, else selected; 390 px), the status leading the
# tab's title live (started, running, completed, cancelled, failed), and
# the 401 page, and a page whose link stopped working, saying how to get
# a new link.  Issue 25, 4: the run's end told by a notification, asked
# for by a button (never on load), only on the page whose button was
# pressed.  Issue 25, 6: the run page as read on a phone — the status and
# the timeline first, the details, task and tokens after (beside the
# timeline on a desktop); the page follows the newest step while the
# reader is at the timeline's end, stays put once they scroll away (and,
# in a browser without scroll anchoring, while they read below it), and
# "Back to the newest step" returns; the files the agent wrote so far in
# the summary while it runs (hostile names as text), then the diff; a
# long command folded and shown once; Cancel asking to confirm (a second
# press, "Keep it running", or 5 s); the run list's repository, branch,
# duration (live) and cost.  Screenshots go to build/ui-screenshots/ (the
# docs' are copies in docs/screenshots/: run-desktop.png, run-phone.png —
# a running run at 390 px —, runs-phone.png, runs-form-phone.png: the New
# run form at 390 px).
#
# The browser side is t/js/ui_browser.mjs; it reports one JSON line per
# check and every line becomes an assertion here (SMCP::Test::js_checks).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);
use SMCP::Test qw(repo_root json_encode require_prereqs js_checks chromium_bin
                  browser_missing tool_ok);

my $root = repo_root();

# the checks t/js/ui_browser.mjs reports, in order
my @EXPECTED = (
    'the watchUrl loads the run page and the address bar has no token',
    'the run cookie is HttpOnly, SameSite=Strict, scoped to the run',
    'the run page shows task, title, repository, model and status',
    'the tab title leads with the status: started',
    'the session id is shown; Copy puts it on the clipboard',
    'without the Clipboard API, Copy selects the session id',
    'the page asks for no notification on load; a live run offers the button',
    'the button asks the browser; granted, the page says it will tell',
    'the status turns running without reload',
    'the tab title turns running, live',
    'the timeline grows without reload: tool call, command, folded output, egress',
    'the timeline grows further: text reply, error, log line',
    'tokens and cost so far add up the steps',
    'desktop: the details, task and tokens stand beside the timeline',
    '390 px, a running run: the status and the timeline first, then the details, task, tokens and cost',
    'while it runs, the files changed so far show in the summary',
    'the status turns completed without reload',
    'the cost metered at the egress, once the run ended',
    'the tab title turns completed, live',
    "the run's end is told by one notification: status, title, the result's first line",
    'the result, the pull request link and the diff render',
    'the run ended: its diff takes over from the files so far',
    "a watchUrl: every link on the page opens; All runs and the session's runs are not offered, the page says how to reach them",
    'the page was loaded once: no reload, no script error',
    '390 px: the run page does not scroll sideways',
    '390 px: the session id and its Copy button fit the screen',
    'dark mode: the page follows the system setting',
    'nginx reload: the page reconnects and resumes, missing nothing',
    'a running run has a Cancel button',
    'Cancel clicked, then Confirm cancel: cancel requested in Redis and the runners told',
    'the page shows cancelled once the runner stopped the run',
    'a page whose button was not pressed tells nothing',
    'the tab title turns cancelled, live',
    'Cancel by keyboard on a started run: Enter, Enter again, cancelled at once',
    'XSS: task, title, result, tool output and file names show as text',
    'XSS: no script ran and no element came from the data',
    '390 px: long unbroken words (title, command, output, log, diff) wrap',
    '390 px, a long timeline opened: the page stays at the top; a button leads to the newest step',
    'Back to the newest step: the newest step in view, the button gone',
    'at the end, the page follows: new steps come into view',
    'scrolled up: the page stops following and stays put while steps come; the button shows',
    'the button again: back at the newest step, and following again',
    'while it runs: the files written so far, each once, names as text (not errors, not reads)',
    'a long command is folded under its first line and shown once; a title that repeats it is not shown',
    'reading below the timeline (no scroll anchoring): new steps do not move what is read',
    "... the reader's scroll whose event comes after new steps is judged by where the timeline ended before them",
    "... a scroll event while the timeline has grown and is not yet put back is not the reader's move",
    'Cancel asks to confirm: one press cancels nothing; Keep it running, or 5 s, undoes it',
    'the run ends: the diff takes over from the files so far; no button back',
    'run list: the tenant link opens it and leaves no token in the address',
    'run list: newest first, a page at a time, older ones by cursor',
    'run list: each row shows repository, branch, duration and cost',
    'run list: the status filter',
    'run list: a status changes live',
    "run list: a running run's duration counts live; once it ended, its duration stops and its cost shows",
    'run list: after an nginx reload it reconnects and shows what changed',
    'run list: a new run appears at the top, live',
    'run list: a row links to its run page',
    "a failed run's tab title says failed",
    "the tenant's link: the run page offers All runs and the session's runs, and they open",
    "the tenant's link: an ended run offers a follow-up, which starts in its session and opens",
    "the tenant's link: an ended run runs again, the same task and settings in a new session",
    "the run list's form starts a run: the link's grants offered, refusals said, hostile text kept as text",
    "a run's watchUrl offers no follow-up (it only watches)",
    '390 px: the run list does not scroll sideways',
    "390 px: the New run form opens without sideways scroll, its model field's markup refused as text",
    'a tampered link: the 401 page, no run data',
    "the 401 page says how to get a new link: opencode_get_result's watchUrl, make token SUB=<tenant> UI=1",
    'a link that stops working under an open page: it says how to get a new one',
    'no request left the origin',
);

my $chromium = chromium_bin();
require_prereqs(browser_missing());

my $t = SMCP::Test->new(
    workers  => 2,
    location => q{
            sandbox_mcp_max_queued 100;
            sandbox_mcp_tenant_sessions 100;
            sandbox_mcp_default_model test/model-ui;},
    server   => q{
        location /ui/ {
            sandbox_mcp_ui;
        }},
);
$t->start;

my $P = 'smcp:';
my $origin = 'http://127.0.0.1:' . $t->port;
my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session');

# a run by opencode_run_task: its structuredContent
sub run_task {
    my ($args, $name) = @_;
    my $res = $t->call_tool($sid, 'opencode_run_task', $args);
    my $sc = tool_ok($res, $name);
    sleep(0.005);                # distinct created_at: a known order
    return $sc || {};
}

my $X = q{<img src=x onerror="window.__smcpXss=1;alert(1)">}
      . q{</script><script>window.__smcpXss=2;alert(2)</script>};
my $repo = 'https://github.com/acme/app';

my $sibling = run_task({ task => 'Write the login docs', title => 'Login docs',
                         repository => $repo }, 'sibling run');
my %live = (
    task => "Fix the login bug: the session check fails.\nKeep the API.",
    title => 'Fix the login bug', model => 'anthropic/claude-sonnet-4-5',
);
my $live = run_task({ %live, repository => $repo, branch => 'main',
                      sessionId => $sibling->{sessionId} }, 'live run');
my $cancel = run_task({ task => 'A long refactor', title => 'Refactor' }, 'run to cancel');
my $started = run_task({ task => 'Queued work', title => 'Queued' }, 'started run to cancel');
my $xss = run_task({ task => "task $X", title => "title $X" }, 'XSS run');
my $reload = run_task({ task => 'Watched across a reload', title => 'Reload' },
                      'run watched across a reload');
my $expiring = run_task({ task => 'Watched while its link expires', title => 'Expiring' },
                        'run watched while its link expires');
my $follow = run_task({ task => 'Read on a phone while it runs', title => 'Followed',
                        repository => $repo, branch => 'follow-steps' },
                      'run read on a phone while it runs');
# the fillers name a repository and a branch every other one (the list shows them)
my @fill = map { run_task({ task => "filler $_", title => "Filler $_",
                            ($_ % 2 ? (repository => $repo, branch => "filler-$_") : ()) },
                          "filler $_") } 1 .. 19;

my @all = ($sibling, $live, $cancel, $started, $xss, $reload, $expiring, $follow, @fill);
is(scalar(grep { ($_->{watchUrl} // '') =~ m{/ui/runs/run_[0-9a-f]{24}\?token=} } @all),
   scalar(@all), 'every run has a watchUrl');

my $diff = join '',
    "diff --git a/src/login.js b/src/login.js\n",
    "index 3b18e51..a9c2f0d 100644\n",
    "--- a/src/login.js\n",
    "+++ b/src/login.js\n",
    "\@\@ -1,3 +1,3 \@\@\n",
    " function sameUser(s, id) {\n",
    "-  return s.id == \"1\";\n",
    "+  return s.id === id;\n",
    " }\n",
    "diff --git a/docs/login.md b/docs/login.md\n",
    "new file mode 100644\n",
    "--- /dev/null\n",
    "+++ b/docs/login.md\n",
    "\@\@ -0,0 +1,2 \@\@\n",
    "+# Login\n",
    "+Sessions compare ids as numbers.\n";

my $xdiff = "diff --git a/$X b/$X\nnew file mode 100644\n--- /dev/null\n"
          . "+++ b/$X\n\@\@ -0,0 +1,3 \@\@\n+$X\n+" . ('d' x 3000) . "\n"
          . "+++ b/not-a-file-name\n";      # an added line, not a header

# a token whose signature is changed: the 401 page
(my $tampered = $live->{watchUrl}) =~ s/(token=[^.]+\.[^.]+\.)(.)/$1 . ($2 eq 'A' ? 'B' : 'A')/e;

my $shots = "$root/build/ui-screenshots";
my %cfg = (
    origin => $origin, prefixPath => '/ui/', prefix => $P,
    redisPort => $t->redis_port, chromium => $chromium,
    scripts => "$root/ngx_sandbox_mcp_module/common/scripts", shots => $shots,
    live => {
        runId => $live->{runId}, watchUrl => $live->{watchUrl}, %live,
        sessionId => $live->{sessionId},
        repository => $repo, reply => 'The check compared a string with a number.',
        result => "Fixed the session check in src/login.js and documented it.",
        prUrl => 'https://github.com/acme/app/pull/7', diff => $diff,
        sibling => { runId => $sibling->{runId}, title => 'Login docs' },
    },
    reload => { runId => $reload->{runId}, watchUrl => $reload->{watchUrl} },
    nginxPid => $t->nginx_pid,
    cancel => { runId => $cancel->{runId}, watchUrl => $cancel->{watchUrl},
                title => 'Refactor' },
    cancelStarted => { runId => $started->{runId}, watchUrl => $started->{watchUrl} },
    xss => { runId => $xss->{runId}, watchUrl => $xss->{watchUrl}, payload => $X,
             task => "task $X", title => "title $X", diff => $xdiff },
    list => {
        url => "$origin/ui/?token=" . $t->token(scope => 'ui', repos => ['acme/*']),
        newestFirst => [ map { $_->{runId} } reverse @all ],
        completed => [ $follow->{runId}, $xss->{runId}, $live->{runId} ],
        changing => $fill[-1]{runId},
        changingTitle => 'Filler 19',
        changingAway => $fill[-2]{runId},
    },
    denied => { url => $tampered },
    expiring => { runId => $expiring->{runId}, watchUrl => $expiring->{watchUrl} },
    follow => { runId => $follow->{runId}, watchUrl => $follow->{watchUrl}, payload => $X },
    mcp => { url => "$origin/mcp", token => $t->token },
);
my $cfg_file = $t->dir . '/ui_browser.json';
open(my $fh, '>', $cfg_file) or die "$cfg_file: $!";
print $fh json_encode(\%cfg);
close $fh;

js_checks('browser', ["$root/t/js/ui_browser.mjs", $cfg_file], \@EXPECTED,
          timeout => 300);

# what the pages did, as Redis has it
is($t->redis('HGET', "${P}run:$cancel->{runId}", 'cancel_requested'), '1',
   'the clicked Cancel reached the run');
is($t->redis('HGET', "${P}run:$started->{runId}", 'status'), 'cancelled',
   'the started run was cancelled');
is($t->redis('HGET', "${P}run:$live->{runId}", 'cancel_requested') // '', '',
   'the watched run was never cancelled');
is($t->redis('HGET', "${P}run:$follow->{runId}", 'cancel_requested') // '', '',
   'Cancel pressed once (not confirmed) cancelled nothing');

for my $f (qw(run-desktop.png run-phone.png runs-phone.png runs-form-phone.png)) {
    ok(-s "$shots/$f", "screenshot $f saved");
}

$t->done;
