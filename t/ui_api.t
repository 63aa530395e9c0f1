#!/usr/bin/perl

# The dashboard's JSON (sandbox_mcp_ui at /ui/), answered by the tools
# themselves: a run as opencode_get_result shows it plus the other runs of
# its session (to the tenant's token; a run's token: t/ui_auth.t), its diff
# in pages, the tenant's list with filters and paging, and cancel, which
# needs a same-origin request (Origin, or Sec-Fetch-Site) with
# X-SMCP-CSRF: 1 (403 and nothing changed otherwise).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_decode json_encode now_ms rhex);

my $t = SMCP::Test->new(
    workers  => 2,
    # the MCP endpoint's settings: a run from the dashboard takes them
    location => q{
            sandbox_mcp_default_model test/from-mcp;},
    server   => q{
        location /ui/ {
            sandbox_mcp_ui;
            sandbox_mcp_public_url https://dash.example:8443;
        }},
);
$t->start;

my $P = 'smcp:';

my ($sid) = $t->initialize;
my @runs;
for my $i (1 .. 3) {
    my $res = $t->call_tool($sid, 'opencode_run_task',
                            { task => "task $i", title => "title $i",
                              ($i > 1 ? (sessionId => $runs[0]{sessionId}) : ()) });
    push @runs, SMCP::Test::sc($res) || {};
}
like($runs[$_]{runId} // '', qr/^run_/, "run $_") for 0 .. 2;
is($runs[1]{sessionId}, $runs[0]{sessionId}, 'one session');

my $tok = $t->token(scope => 'ui', repos => undef);
my $C = "smcp_ui=$tok";
my $id = $runs[0]{runId};

sub get {
    my ($path, %o) = @_;
    my $r = $t->http(path => $path, headers => [Cookie => $o{cookie} // $C]);
    return ($r, json_decode($r->{body}));
}

###############################################################################
# data

{
    my ($r, $d) = get("/ui/runs/$id/data");
    is($r->{status}, 200, 'data: 200');
    like($r->{headers}{'content-type'}, qr{^application/json}, '... JSON');
    is($r->{headers}{'cache-control'}, 'no-store', '... no-store');
    my $mcp = SMCP::Test::sc($t->call_tool($sid, 'opencode_get_result', { runId => $id }));
    for my $k (qw(runId sessionId status title task repository branch model createdAt
                  startedAt finishedAt result error exitCode filesChanged diffStat
                  pullRequestUrl tokens cost maxCostUsd timeoutSeconds cancelRequested)) {
        is_deeply($d->{$k}, $mcp->{$k}, "data.$k as get_result");
    }
    is($d->{access}, 'tenant', 'access: "tenant" (the tenant\'s token)');
    is_deeply([ sort map { $_->{runId} } @{ $d->{sessionRuns} } ],
              [ sort map { $_->{runId} } @runs[1, 2] ],
              'sessionRuns: the other runs of the session');
    is_deeply([ sort keys %{ $d->{sessionRuns}[0] } ],
              [ qw(createdAt runId status title) ], '... runId, status, title, createdAt');
}

# a run without a session
{
    my $lone = 'run_' . rhex();
    $t->redis('HSET', "${P}run:$lone", tenant => 'alice', status => 'completed',
              task => 't', created_at => now_ms());
    my ($r, $d) = get("/ui/runs/$lone/data");
    is($r->{status}, 200, 'a run without a session');
    is_deeply($d->{sessionRuns}, [], '... sessionRuns empty');
}

{
    my ($r, $d) = get('/ui/runs/run_' . ('0' x 24) . '/data');
    is($r->{status}, 404, 'unknown run: 404');
    is($d->{error}, 'run not found', '... said');
}

###############################################################################
# diff

{
    my $run = 'run_' . rhex();
    my $diff = join '', map { "diff --git a/f$_ b/f$_\n+" . ('x' x 1000) . "\n" } 1 .. 100;
    $t->redis('HSET', "${P}run:$run", tenant => 'alice', status => 'completed',
              created_at => now_ms());
    $t->redis('SET', "${P}run:$run:diff", $diff);
    my ($r, $d) = get("/ui/runs/$run/diff");
    is($r->{status}, 200, 'diff: 200');
    my $mcp = SMCP::Test::sc($t->call_tool($sid, 'opencode_get_diff', { runId => $run }));
    is_deeply($d, $mcp, '... as get_diff');
    my $all = $d->{diff};
    my $pages = 1;
    while ($d->{truncated} && $pages < 10) {
        ($r, $d) = get("/ui/runs/$run/diff?cursor=$d->{nextCursor}");
        is($r->{status}, 200, "... page " . ++$pages);
        $all .= $d->{diff};
    }
    is($all, $diff, '... the pages make the whole diff');
    ($r, $d) = get("/ui/runs/$run/diff?cursor=bogus");
    is($r->{status}, 400, 'a bad cursor: 400');
    like($d->{error}, qr/cursor/i, '... the tool says why');
}

###############################################################################
# list

{
    my ($r, $d) = get('/ui/api/runs');
    is($r->{status}, 200, 'list: 200');
    my $mcp = SMCP::Test::sc($t->call_tool($sid, 'opencode_list_runs', {}));
    is_deeply($d, $mcp, '... as list_runs');

    ($r, $d) = get('/ui/api/runs?limit=2');
    is(scalar @{ $d->{runs} }, 2, 'limit=2: two');
    ok($d->{nextCursor}, '... and a cursor');
    my ($r2, $d2) = get("/ui/api/runs?limit=2&cursor=$d->{nextCursor}");
    is($r2->{status}, 200, 'the next page');
    my %seen = map { $_->{runId} => 1 } @{ $d->{runs} };
    ok(!grep({ $seen{ $_->{runId} } } @{ $d2->{runs} }), '... other runs');

    $t->redis('HSET', "${P}run:$runs[0]{runId}", status => 'completed');
    ($r, $d) = get('/ui/api/runs?status=completed');
    is_deeply([ map { $_->{runId} } @{ $d->{runs} } ], [ $runs[0]{runId} ],
              'status=completed: only those');
    ($r, $d) = get('/ui/api/runs?status=bogus');
    is($r->{status}, 400, 'a bad status: 400');
    ($r, $d) = get('/ui/api/runs?limit=abc');
    is($r->{status}, 400, 'a bad limit: 400');
    ($r, $d) = get('/ui/api/runs?limit=0');
    is($r->{status}, 400, 'limit 0: 400');
    ($r, $d) = get('/ui/api/runs?cursor=%ff%fe');
    is($r->{status}, 400, 'not UTF-8: 400');
}

###############################################################################
# cancel

sub cancel {
    my ($run, @h) = @_;
    my $r = $t->http(method => 'POST', path => "/ui/runs/$run/cancel", body => '',
                     headers => [Cookie => $C, @h]);
    return ($r, json_decode($r->{body}));
}

my $origin = "http://127.0.0.1:$t->{port}";
my $target = $runs[2]{runId};

for my $case (
    [ 'no header at all', [] ],
    [ 'Origin only', [Origin => $origin] ],
    [ 'CSRF header only', ['X-SMCP-CSRF' => 1] ],
    [ 'another Origin', [Origin => 'https://evil.example', 'X-SMCP-CSRF' => 1] ],
    [ 'Origin null', [Origin => 'null', 'X-SMCP-CSRF' => 1] ],
    [ 'Origin of another port', [Origin => 'http://127.0.0.1:1', 'X-SMCP-CSRF' => 1] ],
    [ 'cross-site fetch', ['Sec-Fetch-Site' => 'cross-site', 'X-SMCP-CSRF' => 1] ],
    [ 'same-site fetch', ['Sec-Fetch-Site' => 'same-site', 'X-SMCP-CSRF' => 1] ],
    [ 'X-SMCP-CSRF 0', [Origin => $origin, 'X-SMCP-CSRF' => 0] ],
    [ 'same-origin fetch but another Origin',
      [Origin => 'https://evil.example', 'Sec-Fetch-Site' => 'same-origin', 'X-SMCP-CSRF' => 1] ],
) {
    my ($name, $h) = @$case;
    my ($r, $d) = cancel($target, @$h);
    is($r->{status}, 403, "cancel, $name: 403");
    is($t->redis('HGET', "${P}run:$target", 'status'), 'started', '... nothing changed');
}

{
    my ($r, $d) = cancel($target, Origin => $origin, 'X-SMCP-CSRF' => 1);
    is($r->{status}, 200, 'cancel, same Origin + X-SMCP-CSRF: 200');
    is($d->{status}, 'cancelled', '... the run object, cancelled');
    is($t->redis('HGET', "${P}run:$target", 'status'), 'cancelled', '... in Redis');

    ($r, $d) = cancel($runs[1]{runId}, 'Sec-Fetch-Site' => 'same-origin', 'X-SMCP-CSRF' => 1);
    is($r->{status}, 200, 'cancel, Sec-Fetch-Site same-origin (no Origin): 200');
    is($d->{status}, 'cancelled', '... cancelled');

    my $running = 'run_' . rhex();
    $t->redis('HSET', "${P}run:$running", tenant => 'alice', status => 'running',
              created_at => now_ms());
    ($r, $d) = cancel($running, Origin => 'https://dash.example:8443', 'X-SMCP-CSRF' => 1);
    is($r->{status}, 200, 'cancel, Origin of sandbox_mcp_public_url: 200');
    is($d->{cancelRequested}, JSON::PP::true, '... a running run: cancel requested');

    my $bobs = 'run_' . rhex();
    $t->redis('HSET', "${P}run:$bobs", tenant => 'bob', status => 'started',
              created_at => now_ms());
    ($r, $d) = cancel($bobs, Origin => $origin, 'X-SMCP-CSRF' => 1);
    is($r->{status}, 404, "another tenant's run: 404");
    is($t->redis('HGET', "${P}run:$bobs", 'status'), 'started', '... unchanged');

    # a run token cancels its run only
    my $rt = $t->token(scope => 'ui', run => $runs[0]{runId}, repos => undef);
    $r = $t->http(method => 'POST', path => "/ui/runs/$bobs/cancel", body => '',
                  headers => [Cookie => "smcp_ui_run=$rt", Origin => $origin,
                              'X-SMCP-CSRF' => 1]);
    is($r->{status}, 401, "a run token on another run's cancel: 401");
}

###############################################################################
# a message to the running agent (opencode_send_message through the page)

# what a POST of the dashboard's from elsewhere looks like: each refused
my @CROSS = (
    [ 'no header at all', [] ],
    [ 'CSRF header only', ['X-SMCP-CSRF' => 1] ],
    [ 'another Origin', [Origin => 'https://evil.example', 'X-SMCP-CSRF' => 1] ],
    [ 'cross-site fetch', ['Sec-Fetch-Site' => 'cross-site', 'X-SMCP-CSRF' => 1] ],
);

sub message {
    my ($run, $body, @h) = @_;
    my $r = $t->http(method => 'POST', path => "/ui/runs/$run/message", body => $body,
                     headers => [Cookie => $C, 'Content-Type' => 'application/json', @h]);
    return ($r, json_decode($r->{body}));
}

{
    my $live = 'run_' . rhex();
    $t->redis('HSET', "${P}run:$live", tenant => 'alice', status => 'running',
              created_at => now_ms());
    my $ok = json_encode({ message => "<b>also</b> the docs \x{e9}" });
    my @same = (Origin => $origin, 'X-SMCP-CSRF' => 1);

    for my $case (@CROSS) {
        my ($name, $h) = @$case;
        my ($r) = message($live, $ok, @$h);
        is($r->{status}, 403, "message, $name: 403");
    }
    is($t->redis('EXISTS', "${P}run:$live:inbox"), 0, '... nothing in the inbox');

    my $r = $t->http(path => "/ui/runs/$live/message", headers => [Cookie => $C]);
    is($r->{status}, 405, 'message, GET: 405');
    is($r->{headers}{allow}, 'POST', '... Allow: POST');

    for my $case (
        [ 'not JSON', 'message=hi' ],
        [ 'a JSON string', '"hi"' ],
        [ 'no message', '{}' ],
        [ 'a number', '{"message":5}' ],
        [ 'another member too', '{"message":"hi","runId":"run_x"}' ],
        [ 'a duplicate member', '{"message":"a","message":"b"}' ],
    ) {
        my ($name, $body) = @$case;
        my ($r2, $d2) = message($live, $body, @same);
        is($r2->{status}, 400, "message, $name: 400");
        like($d2->{error} // '', qr/message/, '... saying what the body is');
    }
    ($r, my $d) = message($live, json_encode({ message => '' }), @same);
    is($r->{status}, 400, 'an empty message: 400 (the tool\'s own check)');
    ($r, $d) = message($live, json_encode({ message => 'x' x 16385 }), @same);
    is($r->{status}, 400, 'a message of 16385 bytes: 400');
    ($r) = message($live, json_encode({ message => 'x' x 70000 }), @same);
    is($r->{status}, 413, 'a body over 64 KiB: 413');
    is($t->redis('EXISTS', "${P}run:$live:inbox"), 0, '... nothing in the inbox');

    ($r, $d) = message($live, $ok, @same);
    is($r->{status}, 200, 'same Origin + X-SMCP-CSRF: 200');
    is_deeply($d, { runId => $live, messageId => 1, status => 'queued', waiting => 1 },
              '... queued');
    my ($m) = map { json_decode($_) } @{ $t->redis('LRANGE', "${P}run:$live:inbox", 0, -1) };
    is($m->{text}, "<b>also</b> the docs \x{e9}", '... its text as sent');
    my ($ev) = grep { ($_->{type} // '') eq 'message' } $t->run_events($live);
    is($ev && $ev->{json}{via}, 'dashboard', '... its event says via dashboard');

    my $bobs = 'run_' . rhex();
    $t->redis('HSET', "${P}run:$bobs", tenant => 'bob', status => 'running',
              created_at => now_ms());
    ($r) = message($bobs, $ok, @same);
    is($r->{status}, 404, "another tenant's run: 404");
    is($t->redis('EXISTS', "${P}run:$bobs:inbox"), 0, '... nothing in its inbox');

    my $rt = $t->token(scope => 'ui', run => $runs[0]{runId}, repos => undef);
    $r = $t->http(method => 'POST', path => "/ui/runs/$live/message", body => $ok,
                  headers => [Cookie => "smcp_ui_run=$rt", @same]);
    is($r->{status}, 401, "a run token on another run's message: 401");
    my $own = $t->token(scope => 'ui', run => $live, repos => undef);
    ($r, $d) = (undef, undef);
    $r = $t->http(method => 'POST', path => "/ui/runs/$live/message", body => $ok,
                  headers => [Cookie => "smcp_ui_run=$own", @same]);
    is($r->{status}, 403, "its own run's watch token (a watchUrl): 403, it only watches");
    like(json_decode($r->{body})->{error} // '', qr/tenant's link/, '... saying what steers');
    is($t->redis('LLEN', "${P}run:$live:inbox"), 1, '... nothing more in the inbox');

    my $chunked = $t->http(method => 'POST', path => "/ui/runs/$live/message",
        headers => [Cookie => $C, 'Content-Type' => 'application/json',
                    'Transfer-Encoding' => 'chunked', @same],
        body => "5\r\n{\"me\"\r\n0\r\n\r\n");
    is($chunked->{status}, 411, 'a chunked body: 411, read by no one');

    $t->redis('HSET', "${P}run:$live", status => 'completed');
    ($r, $d) = message($live, $ok, @same);
    is($r->{status}, 400, 'a run that has ended: 400');
    like($d->{error} // '', qr/opencode_run_task.*sessionId/s, '... naming the way on');
}

###############################################################################
# the link's grants, which the new run form offers

{
    my $r = $t->http(path => '/ui/api/grants', headers => [Cookie => $C]);
    is($r->{status}, 200, 'api/grants: 200');
    is_deeply(json_decode($r->{body}), { repositories => [],
                                         repositoryBase => 'https://github.com/' },
              '... none for a link without a repos claim; the git host\'s URLs');
    my $g = $t->token(scope => 'ui', repos => ['acme/app', 'acme/*']);
    $r = $t->http(path => '/ui/api/grants', headers => [Cookie => "smcp_ui=$g"]);
    is_deeply(json_decode($r->{body})->{repositories}, ['acme/app', 'acme/*'],
              '... its repos claim');
    my $bad = $t->token(scope => 'ui', repos => ['../etc']);
    $r = $t->http(path => '/ui/api/grants', headers => [Cookie => "smcp_ui=$bad"]);
    is($r->{status}, 401, '... a link whose repos claim is not grants: 401');
    my $rt = $t->token(scope => 'ui', run => $id, repos => undef);
    $r = $t->http(path => '/ui/api/grants', headers => [Cookie => "smcp_ui_run=$rt"]);
    is($r->{status}, 401, "... a run's watch token: 401");
    $r = $t->http(method => 'POST', path => '/ui/api/grants', body => '{}',
                  headers => [Cookie => $C, Origin => $origin, 'X-SMCP-CSRF' => 1]);
    is($r->{status}, 405, '... POST: 405');
}

###############################################################################
# a new run from the dashboard (POST api/runs: opencode_run_task's
# arguments), a session's follow-up with sessionId

sub start {
    my ($body, %o) = @_;
    my $r = $t->http(method => 'POST', path => '/ui/api/runs', body => $body,
                     headers => [Cookie => $o{cookie} // $C,
                                 'Content-Type' => 'application/json',
                                 @{ $o{headers} || [] }]);
    return ($r, json_decode($r->{body}));
}

{
    my @same = (Origin => $origin, 'X-SMCP-CSRF' => 1);
    my $session = $runs[0]{sessionId};
    my $count = sub { scalar grep { !/:.*:.*:/ } @{ $t->redis('KEYS', "${P}run:run_*") } };
    my $n0 = $count->();
    my $ok = json_encode({ task => "<script>alert(1)</script> follow \x{e9}",
                           sessionId => $session });

    for my $case (@CROSS) {
        my ($name, $h) = @$case;
        my ($r) = start($ok, headers => $h);
        is($r->{status}, 403, "new run, $name: 403");
    }

    my $own = $t->token(scope => 'ui', run => $id, repos => undef);
    my ($r, $d) = start($ok, cookie => "smcp_ui_run=$own", headers => \@same);
    ok($r->{status} == 401 || $r->{status} == 403,
       "a run's watch token (a watchUrl): $r->{status}, it only watches");

    $r = $t->http(method => 'PUT', path => '/ui/api/runs', body => $ok,
                  headers => [Cookie => $C, @same]);
    is($r->{status}, 405, 'PUT api/runs: 405');
    is($r->{headers}{allow}, 'GET, HEAD, POST', '... Allow: GET, HEAD, POST');

    for my $case (
        [ 'not JSON', 'task=hi' ],
        [ 'a JSON string', '"hi"' ],
        [ 'a JSON array', '[{"task":"hi"}]' ],
        [ 'a duplicate member', '{"task":"a","task":"b"}' ],
    ) {
        my ($name, $body) = @$case;
        my ($r2, $d2) = start($body, headers => \@same);
        is($r2->{status}, 400, "new run, $name: 400");
        like($d2->{error} // '', qr/opencode_run_task's arguments/, '... saying what the body is');
    }
    for my $case (
        [ 'no task', {} ],
        [ 'an empty task', { task => '' } ],
        [ 'a task that is a number', { task => 5 } ],
        [ 'a member the tool does not take', { task => 'x', tenant => 'bob' } ],
        [ 'an unknown session (as another tenant\'s)', { task => 'x', sessionId => 'ses_' . ('ab' x 12) } ],
        [ 'a repository the link does not grant', { task => 'x', repository => 'https://github.com/acme/app' } ],
        [ 'a timeout of -1', { task => 'x', timeoutSeconds => -1 } ],
    ) {
        my ($name, $args) = @$case;
        my ($r2, $d2) = start(json_encode($args), headers => \@same);
        ok($r2->{status} == 400 || $r2->{status} == 404, "new run, $name: $r2->{status}")
            or diag($r2->{body});
        ok(length($d2->{error} // ''), '... with the tool\'s words: ' . ($d2->{error} // ''));
    }
    ($r) = start(json_encode({ task => 'x' x 70000 }), headers => \@same);
    is($r->{status}, 413, 'a body over 64 KiB: 413');
    my $chunked = $t->http(method => 'POST', path => '/ui/api/runs',
        headers => [Cookie => $C, 'Content-Type' => 'application/json',
                    'Transfer-Encoding' => 'chunked', @same],
        body => "5\r\n{\"ta\"\r\n0\r\n\r\n");
    is($chunked->{status}, 411, 'a chunked body: 411, read by no one');
    is($count->(), $n0, '... no run made by any of them');

    ($r, $d) = start($ok, headers => \@same);
    is($r->{status}, 200, 'a follow-up, same Origin + X-SMCP-CSRF: 200') or diag($r->{body});
    like($d->{runId} // '', qr/^run_/, '... a new run');
    is($d->{sessionId}, $session, '... in the session');
    like($d->{watchUrl} // '', qr{/ui/runs/\Q$d->{runId}\E\?token=}, '... with its watchUrl');
    my $h = $t->run_hash($d->{runId});
    my $task = $h->{task} // '';
    utf8::decode($task);
    is($task, "<script>alert(1)</script> follow \x{e9}", '... its task as sent');
    is($h->{tenant}, $t->{tenant}, '... the link\'s tenant\'s');
    is($h->{model}, 'test/from-mcp', '... with the MCP endpoint\'s settings (its default model)');
    is($count->(), $n0 + 1, '... one run made');
}

$t->done;
