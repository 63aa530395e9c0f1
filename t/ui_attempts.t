#!/usr/bin/perl
# A group's attempts (issue 26, point 1) on the run page, in real headless
# Chromium against nginx with the module and Redis: three attempts made by
# opencode_run_task, their states set in Redis as the runner leaves them;
# with the tenant's link the second's page shows the three side by side
# (status, changes, cost, pull request) and a link to each other
# attempt's changes that opens its page; the third's watchUrl (a run's
# link, which opens its run only) shows of the others their number and
# status, nothing more, one under the other at 390 px without sideways
# scrolling.  The browser side is t/js/ui_attempts.mjs.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root json_encode require_prereqs js_checks chromium_bin
                  browser_missing tool_ok);

my $root = repo_root();
my @EXPECTED = (
    "the second attempt's page lists the three attempts, this one marked",
    'each shows its status, changes, cost and pull request',
    'desktop: the attempts side by side',
    "the tenant's link: each other attempt's changes linked",
    "the link opens the first attempt's page and its changes",
    "a watchUrl: the others' number and status only, no link, no words of theirs",
    '390 px: one under the other, no sideways scroll',
    'no script error',
);

my $chromium = chromium_bin();
require_prereqs(browser_missing());

my $t = SMCP::Test->new(
    workers  => 2,
    location => q{
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

my $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_run_task',
                               { task => 'Make the login faster', attempts => 3,
                                 repository => 'https://github.com/acme/app' }),
                 'three attempts');
my @runs = @{ $sc->{attempts} || [] };
is(scalar @runs, 3, 'three attempts answered') or SMCP::Test::give_up('no attempts');

# as the runner leaves them: the first completed (its diff, cost, pull
# request), the second failed, the third running
my $pr = 'https://github.com/acme/app/pull/12';
my $diff = "diff --git a/a.js b/a.js\n--- a/a.js\n+++ b/a.js\n\@\@ -1 +1,3 \@\@\n-x\n+y\n+z\n+w\n"
         . "diff --git a/b.js b/b.js\n--- a/b.js\n+++ b/b.js\n\@\@ -1 +1,2 \@\@\n+q\n+r\n";
my $now = int(time() * 1000);
$t->redis('HSET', "${P}run:$runs[0]{runId}", status => 'completed', started_at => $now - 9000,
          finished_at => $now - 1000, diff_stat => '2 files changed, 5 insertions(+)',
          cost => '0.42', pr_url => $pr, pr_status => 'opened', result => 'Faster.',
          files_changed => '["a.js","b.js"]');
$t->redis('SET', "${P}run:$runs[0]{runId}:diff", $diff);
$t->redis('HSET', "${P}run:$runs[1]{runId}", status => 'failed', started_at => $now - 8000,
          finished_at => $now - 2000, error => 'the tests failed', cost => '0.1');
$t->redis('HSET', "${P}run:$runs[2]{runId}", status => 'running', started_at => $now - 7000);

my %cfg = (origin => $origin, chromium => $chromium, runs => \@runs, prUrl => $pr,
           tenantUrl => "$origin/ui/?token=" . $t->token(scope => 'ui'));
my $cfg_file = $t->dir . '/ui_attempts.json';
open(my $fh, '>', $cfg_file) or die "$cfg_file: $!";
print $fh json_encode(\%cfg);
close $fh;

js_checks('browser', ["$root/t/js/ui_attempts.mjs", $cfg_file], \@EXPECTED, timeout => 180);

$t->done;
