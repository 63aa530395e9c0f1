#!/usr/bin/perl

# The run tools of ngx_sandbox_mcp_module against a real Redis (sessions:
# t/mcp_sessions.t): argument validation (nothing written on error), the
# Redis records of a new run (pull request arguments, a session's
# repositories), get_result and its long-poll, list_runs paging and
# filters, cancel_run in each state, get_diff and get_events paging.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(hmac_sha256);
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode json_decode b64url b64url_decode now_ms iso_ms
                  tool_ok tool_err);

my $t = SMCP::Test->new(
    workers  => 2,
    location => q{
            sandbox_mcp_max_task_size 1k;
            sandbox_mcp_run_timeout 30m;
            sandbox_mcp_run_timeout_max 2h;
            sandbox_mcp_max_wait 30s;
            sandbox_mcp_public_url http://mcp.test:9999;
            sandbox_mcp_default_model test/model-x;},
    server => q{
        location /shortwait {
            sandbox_mcp;
            sandbox_mcp_max_wait 2s;
        }
        location /defaults {
            sandbox_mcp;
        }
        location /ghe {
            sandbox_mcp;
            sandbox_mcp_github_host git.example.org;
        }},
);
$t->start;

my $P = 'smcp:';
my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session: cannot test tools');

my $bob_tok = $t->token(sub => 'bob');
my ($bob_sid) = $t->initialize(token => $bob_tok);

###############################################################################
# helpers

sub call { my ($name, $args, %o) = @_; return scalar $t->call_tool($sid, $name, $args, %o) }

sub dbsize { return $t->redis('DBSIZE') }

sub queue_entries_for {
    my ($run) = @_;
    my $x = $t->redis('XRANGE', "${P}queue", '-', '+') || [];
    return scalar grep {
        my %f = @{ $_->[1] || [] };
        ($f{run} // '') eq $run;
    } @$x;
}

###############################################################################
# run_task validation: isError + nothing written

my $ghost_ses = 'ses_' . ('0' x 24);
my ($bob_run_ses);
{
    my $bob = $t->call_tool($bob_sid, 'opencode_run_task', { task => 'bob task' },
                            token => $bob_tok);
    $bob_run_ses = (SMCP::Test::sc($bob) || {})->{sessionId};
    like($bob_run_ses // '', qr/^ses_[0-9a-f]{24}$/, 'bob has a run session');
}

my @invalid = (
    [ {},                                 qr/task/,         'missing task' ],
    [ { task => '' },                     qr/task/,         'empty task' ],
    [ { task => 42 },                     qr/task/,         'numeric task' ],
    [ { task => ['a'] },                  qr/task/,         'array task' ],
    [ { task => { x => 1 } },             qr/task/,         'object task' ],
    [ { task => undef },                  qr/task/,         'null task' ],
    [ { task => JSON::PP::true },         qr/task/,         'boolean task' ],
    [ { task => 'x' x 1025 },             qr/task/,         'task over sandbox_mcp_max_task_size' ],
    [ { task => 't', repository => 'http://github.com/a/b' },          qr/repository/, 'repository http://' ],
    [ { task => 't', repository => 'git@github.com:a/b.git' },         qr/repository/, 'repository scp-like' ],
    [ { task => 't', repository => 'ssh://git@github.com/a/b' },       qr/repository/, 'repository ssh://' ],
    [ { task => 't', repository => 'file:///etc' },                    qr/repository/, 'repository file://' ],
    [ { task => 't', repository => 'https://gitlab.com/a/b' },         qr/repository/, 'repository wrong host' ],
    [ { task => 't', repository => 'https://github.com.evil.com/a/b' }, qr/repository/, 'repository host suffix trick' ],
    [ { task => 't', repository => 'https://evil.com/github.com/a/b' }, qr/repository/, 'repository host in path' ],
    [ { task => 't', repository => 'https://user:pass@github.com/a/b' }, qr/repository/, 'repository with credentials' ],
    [ { task => 't', repository => 'https://ghp_token@github.com/a/b' }, qr/repository/, 'repository with a token' ],
    [ { task => 't', repository => 'https://github.com:8443/a/b' },    qr/repository/, 'repository with a port' ],
    [ { task => 't', repository => 42 },                               qr/repository/, 'numeric repository' ],
    [ { task => 't', repository => "https://github.com/a/b\n" },       qr/repository/, 'repository with a newline' ],
    (map { [ { task => 't', branch => $_ }, qr/branch/, "branch '$_'" ] }
        'a..b', '-x', 'x.lock', 'a b', 'a~1', 'a^b', 'a:b', 'a?b', 'a*b',
        'a[b', 'a\\b', 'a/', '/a', 'a//b', 'a.', 'a@{b', '.hidden', "a\tb",
        "a\nb", 'a/.b'),
    [ { task => 't', branch => 42 },                 qr/branch/,  'numeric branch' ],
    [ { task => 't', sessionId => $ghost_ses },       qr/session/i, 'unknown sessionId' ],
    [ { task => 't', sessionId => 'bogus' },          qr/session/i, 'malformed sessionId' ],
    [ { task => 't', sessionId => $bob_run_ses // 'ses_1' }, qr/session/i, "another tenant's sessionId" ],
    [ { task => 't', sessionId => 5 },                qr/session/i, 'numeric sessionId' ],
    [ { task => 't', createPullRequest => 'yes' },    qr/createPullRequest/, 'createPullRequest string' ],
    [ { task => 't', createPullRequest => 1 },        qr/createPullRequest/, 'createPullRequest number' ],
    [ { task => 't', createPullRequest => JSON::PP::true }, qr/createPullRequest.*repository/,
      'createPullRequest without repository or session' ],
    [ { task => 't', branch => 'feature' },           qr/branch.*repository/, 'branch without repository or session' ],
    (map { [ { task => 't', repository => 'https://github.com/acme/widgets', baseBranch => $_ },
             qr/baseBranch/, "baseBranch '$_'" ] } 'a..b', '-x', 'x.lock', 'a b', "a
b"),
    [ { task => 't', baseBranch => 7 },               qr/baseBranch/, 'numeric baseBranch' ],
    [ { task => 't', prTitle => 'x' x 257 },          qr/prTitle.*too long/, 'prTitle over 256 bytes' ],
    [ { task => 't', prTitle => "two\nlines" },      qr/prTitle/, 'prTitle with a newline' ],
    [ { task => 't', prTitle => "bell\x07" },        qr/prTitle/, 'prTitle with a control character' ],
    [ { task => 't', prTitle => ['x'] },              qr/prTitle/, 'array prTitle' ],
    [ { task => 't', draft => 'yes' },                qr/draft/, 'draft string' ],
    [ { task => 't', draft => 0 },                    qr/draft/, 'draft number' ],
    [ { task => 't', timeoutSeconds => 'long' },      qr/timeoutSeconds/, 'timeoutSeconds string' ],
    [ { task => 't', timeoutSeconds => 0 },           qr/timeoutSeconds/, 'timeoutSeconds 0' ],
    [ { task => 't', timeoutSeconds => -5 },          qr/timeoutSeconds/, 'timeoutSeconds negative' ],
    [ { task => 't', timeoutSeconds => 1.5 },         qr/timeoutSeconds/, 'timeoutSeconds fractional' ],
    [ { task => 't', timeoutSeconds => 7201 },        qr/timeoutSeconds/, 'timeoutSeconds over sandbox_mcp_run_timeout_max' ],
    [ { task => 't', model => 42 },                   qr/model/, 'numeric model' ],
    [ { task => 't', title => [] },                   qr/title/, 'array title' ],
);

for my $c (@invalid) {
    my ($args, $re, $name) = @$c;
    my $before = $t->redis_snapshot;
    my $n = dbsize();
    my $res = call('opencode_run_task', $args);
    tool_err($res, $re, "run_task: $name");
    is(dbsize(), $n, "run_task: $name: DBSIZE unchanged");
    is_deeply($t->redis_snapshot, $before, "run_task: $name: Redis unchanged")
        or diag(json_encode([ sort keys %{ $t->redis_snapshot } ]));
}

{
    # arguments that are not an object at all
    my $r = $t->rpc($sid, 'tools/call', { name => 'opencode_run_task', arguments => 'x' });
    my $j = $r->{json} || {};
    ok(($j->{error} && $j->{error}{code} == -32602)
       || ($j->{result} && $j->{result}{isError}),
       'arguments not an object -> -32602 or isError');
}

###############################################################################
# a valid run_task

my %runs;    # runId => args
my $t0 = now_ms();
my $args1 = { task => 'Fix the failing test in src/a.c', title => 'Fix test',
              repository => 'https://github.com/acme/widgets',
              branch => 'feature/x-1.2_y', createPullRequest => JSON::PP::true,
              timeoutSeconds => 600, model => 'openai/gpt-5' };
my $sc1 = tool_ok(call('opencode_run_task', $args1), 'run_task');
my $run1 = $sc1->{runId} // 'run_missing';
my $ses1 = $sc1->{sessionId} // 'ses_missing';
{
    like($run1, qr/^run_[0-9a-f]{24}$/, 'runId run_ + 24 hex');
    like($ses1, qr/^ses_[0-9a-f]{24}$/, 'sessionId ses_ + 24 hex');
    is($sc1->{status}, 'started', 'status started');
    my $url = $sc1->{watchUrl} // '';
    like($url, qr{^http://mcp\.test:9999/ui/runs/\Q$run1\E\?token=[\w-]+\.[\w-]+\.[\w-]+$},
         'watchUrl = public_url/ui/runs/{runId}?token=JWT');
    if ($url =~ /token=([\w.-]+)$/) {
        my $jwt = $1;
        my ($h, $p, $s) = split /\./, $jwt;
        is(b64url(hmac_sha256("$h.$p", $t->secret)), $s, 'ui token signed with the secret');
        my ($hdr, $cl) = SMCP::Test::decode_jwt($jwt);
        is($hdr->{alg}, 'HS256', 'ui token HS256');
        is($cl->{sub}, 'alice', 'ui token sub = tenant');
        is($cl->{scope}, 'ui', 'ui token scope ui');
        ok(($cl->{exp} // 0) > time(), 'ui token has a future exp');
        # the ui token is no MCP token
        my $r = $t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' },
                             session => $sid, token => $jwt);
        is($r->{status}, 401, 'the watchUrl token is refused on /mcp');
    }

    my $h = $t->run_hash($run1);
    is($h->{tenant}, 'alice', 'run hash: tenant');
    is($h->{session}, $ses1, 'run hash: session');
    is($h->{task}, $args1->{task}, 'run hash: task');
    is($h->{repository}, $args1->{repository}, 'run hash: repository');
    is($h->{branch}, $args1->{branch}, 'run hash: branch');
    is($h->{model}, 'openai/gpt-5', 'run hash: model');
    is($h->{title}, 'Fix test', 'run hash: title');
    is($h->{create_pr}, '1', 'run hash: create_pr 1');
    is($h->{timeout}, '600', 'run hash: timeout');
    is($h->{status}, 'started', 'run hash: status started');
    ok(($h->{created_at} // 0) >= $t0 - 1000 && $h->{created_at} <= now_ms() + 1000,
       "run hash: created_at in ms ($h->{created_at})");
    ok(!$h->{finished_at}, 'run hash: no finished_at yet');
    ok(!$h->{cancel_requested}, 'run hash: cancel not requested');

    my $score = $t->redis('ZSCORE', "${P}runs:alice", $run1);
    ok(defined $score, 'run in runs:alice');
    is($score, $h->{created_at}, 'runs:alice score = created_at');

    my $sh = $t->redis_hgetall("${P}session:$ses1");
    is($sh->{tenant}, 'alice', 'session hash: tenant');
    ok($sh->{created_at}, 'session hash: created_at');
    is($sh->{last_run}, $run1, 'session hash: last_run');
    ok(defined $t->redis('ZSCORE', "${P}session:$ses1:runs", $run1),
       'run in session:{id}:runs');
    is(queue_entries_for($run1), 1, 'one queue entry for the run');
    $runs{$run1} = $args1;
}

# a second run in the same session; defaults
my $sc2 = tool_ok(call('opencode_run_task', { task => 'second', sessionId => $ses1 }),
                  'run_task with sessionId');
my $run2 = $sc2->{runId} // 'run_missing2';
{
    is($sc2->{sessionId}, $ses1, 'same sessionId returned');
    isnt($run2, $run1, 'a new runId');
    my $h = $t->run_hash($run2);
    is($h->{session}, $ses1, 'run 2 in session 1');
    is($h->{model}, 'test/model-x', 'model defaults to sandbox_mcp_default_model');
    is($h->{timeout}, '1800', 'timeout defaults to sandbox_mcp_run_timeout (30m)');
    is($h->{create_pr} // '0', '0', 'create_pr defaults to 0');
    is($h->{repository}, $args1->{repository},
       "no repository named: the session's first");
    is($h->{repositories}, qq(["$args1->{repository}"]), "... the session's list");
    is($h->{branch}, '', 'no branch named: none stored');
    is($h->{draft}, '0', 'draft defaults to 0');
    is($t->redis('ZCARD', "${P}session:$ses1:runs"), 2, 'session has 2 runs');
    is($t->redis('HGET', "${P}session:$ses1", 'last_run'), $run2, 'last_run updated');
    is(queue_entries_for($run2), 1, 'one queue entry for run 2');
    $runs{$run2} = {};
}

# a run without sessionId gets a new session; limits exactly at the max
my $sc3 = tool_ok(call('opencode_run_task', { task => 'y' x 1024, timeoutSeconds => 7200 }),
                  'run_task at max task size and max timeout');
my $run3 = $sc3->{runId} // 'run_missing3';
isnt($sc3->{sessionId}, $ses1, 'no sessionId -> a new session');
is($t->run_hash($run3)->{timeout}, '7200', 'timeoutSeconds 7200 accepted');
$runs{$run3} = {};

# a session without repository: branch and createPullRequest need one
for my $a ({ branch => 'x' }, { createPullRequest => JSON::PP::true }) {
    my $before = $t->redis_snapshot;
    tool_err(call('opencode_run_task', { task => 't', sessionId => $sc3->{sessionId}, %$a }),
             qr/has no repository/, "a follow-up in a session without repository: "
             . join(',', keys %$a));
    is_deeply($t->redis_snapshot, $before, '... nothing written');
}

# pull request arguments; a session's repositories
my $widgets = $args1->{repository};
my $gadgets = 'https://github.com/acme/gadgets';
{
    my $sc = tool_ok(call('opencode_run_task', {
        task => 'follow up', sessionId => $ses1, createPullRequest => JSON::PP::true,
        baseBranch => 'release/1.x', prTitle => "Fix: caf\x{e9} \x{2713}",
        draft => JSON::PP::true, branch => 'topic' }),
        'a follow-up with createPullRequest, baseBranch, prTitle, draft, branch');
    my $h = $t->run_hash($sc->{runId} // 'run_none');
    is($h->{repository}, $widgets, "run hash: repository, the session's first");
    is($h->{repositories}, qq(["$widgets"]), 'run hash: repositories');
    is($h->{branch}, 'topic', "run hash: the follow-up's branch is stored");
    is($h->{create_pr}, '1', 'run hash: create_pr');
    is($h->{base_branch}, 'release/1.x', 'run hash: base_branch');
    is($h->{pr_title}, "Fix: caf\x{c3}\x{a9} \x{e2}\x{9c}\x{93}", 'run hash: pr_title (UTF-8)');
    is($h->{draft}, '1', 'run hash: draft');
    is($h->{watch_base}, "http://mcp.test:9999/ui/runs/$sc->{runId}",
       'run hash: watch_base, the run page without a token');
    $runs{ $sc->{runId} } = {} if $sc->{runId};

    $sc = tool_ok(call('opencode_run_task', {
        task => 'other repo', sessionId => $ses1, repository => "$gadgets.git" }),
        'a follow-up naming a second repository');
    $h = $t->run_hash($sc->{runId} // 'run_none');
    is($h->{repository}, $gadgets, 'run hash: repository, written https://host/owner/name');
    is($h->{repositories}, qq(["$widgets","$gadgets"]),
       "run hash: repositories, the session's, first named first");
    is($t->redis('HGET', "${P}session:$ses1", 'repositories'),
       qq(["$widgets","$gadgets"]), "session hash: repositories");
    ok(defined $t->redis('ZSCORE', "${P}tenant:alice:sessions", $ses1),
       "the session in tenant:alice:sessions");
    $runs{ $sc->{runId} } = {} if $sc->{runId};

    # the most repositories a session may name (8)
    my $first = tool_ok(call('opencode_run_task', {
        task => 'many', repository => 'https://github.com/many/r1' }), 'repository 1');
    my $ses = $first->{sessionId};
    $runs{ $first->{runId} } = {} if $first->{runId};
    $runs{ $_ } = {} for grep { $_ } map {
        tool_ok(call('opencode_run_task', { task => 'many', sessionId => $ses,
                repository => "https://github.com/many/r$_" }), "repository $_")->{runId}
    } 2 .. 8;
    my $before = $t->redis_snapshot;
    tool_err(call('opencode_run_task', { task => 'many', sessionId => $ses,
                  repository => 'https://github.com/many/r9' }),
             qr/8 repositories/, 'a ninth repository in one session');
    is_deeply($t->redis_snapshot, $before, '... nothing written');
    $runs{ $_ } = {} for grep { $_ } map { $_->{runId} } grep { $_ } (
        tool_ok(call('opencode_run_task', { task => 'many', sessionId => $ses,
                repository => 'https://github.com/MANY/r3' }), 'one of the eight again'));
    $t->redis('SREM', "${P}tenant:alice:started", keys %runs);   # room in the queue
}

# defaults of /defaults: watchUrl from the Host of the request
# defaults of /defaults: watchUrl from the Host of the request
{
    my $r = $t->call_tool($sid, 'opencode_run_task', { task => 'd' }, path => '/defaults');
    my $sc = tool_ok($r, 'run_task on /defaults');
    my $port = $t->port;
    like($sc->{watchUrl} // '', qr{^http://127\.0\.0\.1:$port/ui/runs/run_[0-9a-f]{24}\?token=},
         'default public_url = scheme://Host of the request');
    $runs{ $sc->{runId} } = {} if $sc->{runId};
    my $big = $t->call_tool($sid, 'opencode_run_task', { task => 'z' x 2000 },
                            path => '/defaults');
    my $sc2 = tool_ok($big, 'a 2000-byte task is fine with the default 64k');
    $runs{ $sc2->{runId} } = {} if $sc2->{runId};
}

# sandbox_mcp_github_host
{
    my $r = $t->call_tool($sid, 'opencode_run_task',
                          { task => 'g', repository => 'https://git.example.org/acme/w' },
                          path => '/ghe');
    my $sc = tool_ok($r, 'run_task on the configured github host');
    $runs{ $sc->{runId} } = {} if $sc->{runId};
    my $before = $t->redis_snapshot;
    $r = $t->call_tool($sid, 'opencode_run_task',
                       { task => 'g', repository => 'https://github.com/acme/w' },
                       path => '/ghe');
    tool_err($r, qr/repository/, 'github.com refused when sandbox_mcp_github_host differs');
    is_deeply($t->redis_snapshot, $before, '... nothing written');
}

###############################################################################
# get_result

{
    my $sc = tool_ok(call('opencode_get_result', { runId => $run1 }), 'get_result started');
    for my $k (qw(runId sessionId status title task repository branch model
                  createdAt startedAt finishedAt result error exitCode
                  filesChanged diffStat pullRequestUrl pullRequestStatus tokens
                  cost watchUrl)) {
        ok(exists $sc->{$k}, "get_result has $k");
    }
    is($sc->{runId}, $run1, 'runId');
    is($sc->{sessionId}, $ses1, 'sessionId');
    is($sc->{status}, 'started', 'status');
    is($sc->{title}, 'Fix test', 'title');
    is($sc->{task}, $args1->{task}, 'task');
    is($sc->{repository}, $args1->{repository}, 'repository');
    is($sc->{branch}, $args1->{branch}, 'branch');
    is($sc->{model}, 'openai/gpt-5', 'model');
    is(iso_ms($sc->{createdAt}), $t->run_hash($run1)->{created_at}, 'createdAt ISO-8601 of created_at');
    ok(!defined $sc->{startedAt}, 'startedAt null');
    ok(!defined $sc->{finishedAt}, 'finishedAt null');
    ok(!defined $sc->{pullRequestUrl}, 'pullRequestUrl null before the runner set it');
    ok(!defined $sc->{pullRequestStatus}, 'pullRequestStatus null likewise');
    is(ref $sc->{tokens}, 'HASH', 'tokens object');
    like($sc->{watchUrl} // '', qr{/ui/runs/\Q$run1\E\?token=}, 'watchUrl');

    # the runner finishes it
    my $st = now_ms() - 5000;
    my $ft = now_ms();
    my $files = [ { path => 'src/a.c', additions => 3, deletions => 1 },
                  { path => 'README.md', additions => 10, deletions => 0 } ];
    $t->redis('HSET', "${P}run:$run1", status => 'completed', started_at => $st,
              finished_at => $ft, result => "All done.\nTests pass.", exit_code => 0,
              files_changed => json_encode($files), diff_stat => '2 files changed',
              pr_url => 'https://github.com/acme/widgets/pull/7', pr_status => 'opened',
              tokens_input => 1000, tokens_output => 200, tokens_reasoning => 30,
              tokens_cache_read => 400, tokens_cache_write => 50, cost => '0.0125',
              error => '');
    $sc = tool_ok(call('opencode_get_result', { runId => $run1 }), 'get_result completed');
    is($sc->{status}, 'completed', 'status completed');
    is($sc->{result}, "All done.\nTests pass.", 'result text');
    is($sc->{exitCode}, 0, 'exitCode 0');
    ok(defined $sc->{exitCode} && !ref $sc->{exitCode} && $sc->{exitCode} =~ /^0$/,
       'exitCode is a number');
    is_deeply($sc->{filesChanged}, $files, 'filesChanged decoded');
    is($sc->{diffStat}, '2 files changed', 'diffStat');
    is($sc->{pullRequestUrl}, 'https://github.com/acme/widgets/pull/7', 'pullRequestUrl');
    is($sc->{pullRequestStatus}, 'opened', 'pullRequestStatus');
    is_deeply($sc->{tokens}, { input => 1000, output => 200, reasoning => 30,
                               cacheRead => 400, cacheWrite => 50 }, 'tokens');
    ok(defined $sc->{cost} && abs($sc->{cost} - 0.0125) < 1e-9, 'cost');
    is(iso_ms($sc->{startedAt}), $st, 'startedAt');
    is(iso_ms($sc->{finishedAt}), $ft, 'finishedAt');
    my $text = SMCP::Test::result_text(call('opencode_get_result', { runId => $run1 }));
    like($text, qr/All done/, 'text copy carries the result');

    tool_err(call('opencode_get_result', {}), qr/runId/, 'get_result without runId');
    tool_err(call('opencode_get_result', { runId => 'nope' }), qr/run/i, 'get_result bad runId');
    tool_err(call('opencode_get_result', { runId => 'run_' . ('f' x 24) }),
             qr/run not found/i, 'get_result unknown runId');
    tool_err(call('opencode_get_result', { runId => $run2, waitSeconds => -1 }),
             qr/waitSeconds/, 'waitSeconds negative');
    tool_err(call('opencode_get_result', { runId => $run2, waitSeconds => 'x' }),
             qr/waitSeconds/, 'waitSeconds string');
}

###############################################################################
# get_result long-poll

{
    # the wait expires: current status
    my $t1 = time();
    my $sc = tool_ok(call('opencode_get_result', { runId => $run2, waitSeconds => 2 }),
                     'long-poll expiring');
    my $el = time() - $t1;
    is($sc->{status}, 'started', 'status started after the wait');
    # its 2 s: not at once, nor held to max_wait (30 s)
    ok($el >= 1.8 && $el < 20, sprintf('waited about 2 s (%.2f)', $el));

    # terminal runs answer at once
    $t1 = time();
    $sc = tool_ok(call('opencode_get_result', { runId => $run1, waitSeconds => 20 }),
                  'long-poll on a terminal run');
    $el = time() - $t1;
    is($sc->{status}, 'completed', 'completed');
    ok($el < 10, sprintf('terminal run: no wait, well under its 20 s (%.2f s)', $el));

    # clamped to sandbox_mcp_max_wait (2s on /shortwait)
    $t1 = time();
    $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result',
                  { runId => $run2, waitSeconds => 50 }, path => '/shortwait'),
                  'long-poll clamped');
    $el = time() - $t1;
    ok($el >= 1.5 && $el < 20,
       sprintf('waitSeconds 50 clamped to max_wait 2s, not 50 (%.2f)', $el));

    # woken early by PUBLISH; three concurrent waiters, each of 30 s
    my @p = map {
        $t->mcp_start($t->request_msg('tools/call', { name => 'opencode_get_result',
            arguments => { runId => $run2, waitSeconds => 30 } }), session => $sid)
    } 1 .. 3;
    ok($t->wait_long_polls(3), 'three long-polls wait');
    $t1 = time();
    my $ft = now_ms();
    $t->redis('HSET', "${P}run:$run2", status => 'completed', result => 'woken',
              finished_at => $ft, started_at => $ft - 100, exit_code => 0);
    $t->redis('PUBLISH', "${P}run:$run2", 'completed');
    my $i = 0;
    for my $p (@p) {
        $i++;
        my $r = $t->mcp_finish($p, 45);
        my $res = $r->{json} && $r->{json}{result};
        my $sc = tool_ok($res, "woken long-poll $i");
        is($sc->{status}, 'completed', "waiter $i sees completed");
        is($sc->{result}, 'woken', "waiter $i sees the result");
        ok($r->{elapsed} < 20, sprintf('waiter %d answered well before its 30 s (%.2f s)',
                                       $i, $r->{elapsed}));
    }
    ok(time() - $t1 < 20, sprintf('all waiters woken by the PUBLISH (%.2f s after it), '
                                  . 'not at the end of their wait', time() - $t1));
}

###############################################################################
# clients that leave during a long-poll

{
    my @w = $t->worker_pids;
    my $s = tool_ok(call('opencode_run_task', { task => 'abandoned' }), 'run for abandoned polls');
    my $ra = $s->{runId} // 'run_z';
    $runs{$ra} = {};
    my @p = map {
        $t->mcp_start($t->request_msg('tools/call', { name => 'opencode_get_result',
            arguments => { runId => $ra, waitSeconds => $_ % 2 ? 1 : 20 } }), session => $sid)
    } 1 .. 6;
    ok($t->wait_long_polls(6), 'six long-polls wait');
    close $_->{sock} for @p;          # the clients go away
    ok($t->wait_long_polls(0), '... and their waits end with them');
    $t->redis('PUBLISH', "${P}run:$ra", 'running');    # nobody waits on it now
    sleep(1.2);         # time passes: a timer left behind (1 s) would fire
    $t->redis('HSET', "${P}run:$ra", status => 'completed', finished_at => now_ms());
    $t->redis('PUBLISH', "${P}run:$ra", 'completed');
    my $sc = tool_ok(call('opencode_get_result', { runId => $ra, waitSeconds => 1 }),
                     'serving after abandoned long-polls');
    is($sc->{status}, 'completed', '... completed');
    # (a worker that crashed later still shows in error.log, checked at the end)
    is_deeply([ $t->worker_pids ], \@w, 'workers survive clients leaving long-polls');
}

###############################################################################
# cancel_run

{
    # started -> cancelled at once; a long-poll on it is woken
    my $s = tool_ok(call('opencode_run_task', { task => 'to cancel', sessionId => $ses1 }),
                    'run to cancel');
    my $rc = $s->{runId} // 'run_x';
    $runs{$rc} = {};
    my $p = $t->mcp_start($t->request_msg('tools/call', { name => 'opencode_get_result',
        arguments => { runId => $rc, waitSeconds => 30 } }), session => $sid);
    ok($t->wait_long_polls(1), 'a long-poll on it waits');
    my $t_cancel = now_ms();
    my $sc = tool_ok(call('opencode_cancel_run', { runId => $rc }), 'cancel started run');
    my $t_answer = now_ms();
    is($sc->{status}, 'cancelled', 'started run cancelled at once');
    is($sc->{runId}, $rc, 'cancel returns the run');
    my $h = $t->run_hash($rc);
    is($h->{status}, 'cancelled', 'Redis status cancelled');
    ok(($h->{finished_at} // 0) >= $t_cancel && $h->{finished_at} <= $t_answer,
       'Redis finished_at: the time of the cancel');
    is(iso_ms($sc->{finishedAt}), $h->{finished_at}, 'finishedAt in the answer: finished_at');
    $sc = tool_ok(call('opencode_get_result', { runId => $rc }), 'get_result cancelled');
    is($sc->{status}, 'cancelled', 'get_result shows cancelled');
    is(iso_ms($sc->{finishedAt}), $h->{finished_at}, 'get_result finishedAt: finished_at');
    my $r = $t->mcp_finish($p, 45);
    my $lp = SMCP::Test::sc($r->{json} && $r->{json}{result}) || {};
    is($lp->{status}, 'cancelled', 'long-poll woken by the cancel');
    ok($r->{elapsed} < 20, sprintf('... early (%.2f s of its 30)', $r->{elapsed}));

    # running -> cancel_requested + PUBLISH on cancel
    $s = tool_ok(call('opencode_run_task', { task => 'running one' }), 'run to set running');
    my $rr = $s->{runId} // 'run_y';
    $runs{$rr} = {};
    $t->redis('HSET', "${P}run:$rr", status => 'running', started_at => now_ms(),
              container_id => 'abc123');
    my $subc = $t->redis_connect;
    $subc->subscribe("${P}cancel");
    $sc = tool_ok(call('opencode_cancel_run', { runId => $rr }), 'cancel running run');
    is($sc->{status}, 'running', 'running run stays running until the runner stops it');
    $h = $t->run_hash($rr);
    is($h->{cancel_requested}, '1', 'cancel_requested=1 in Redis');
    is($h->{status}, 'running', 'Redis status still running');
    my $msg = $subc->next_message(10);
    is_deeply($msg, [ "${P}cancel", $rr ], 'run id published on smcp:cancel');

    # terminal -> unchanged, no publish
    my $before = $t->run_hash($run1);
    $sc = tool_ok(call('opencode_cancel_run', { runId => $run1 }), 'cancel completed run');
    is($sc->{status}, 'completed', 'completed run stays completed');
    is_deeply($t->run_hash($run1), $before, 'completed run hash unchanged');
    $before = $t->run_hash($rc);
    $sc = tool_ok(call('opencode_cancel_run', { runId => $rc }), 'cancel cancelled run');
    is($sc->{status}, 'cancelled', 'cancelled stays cancelled');
    is_deeply($t->run_hash($rc), $before, 'cancelled run hash unchanged');
    is($subc->next_message(0.7), undef, 'no cancel message for terminal runs');
    $subc->close;

    tool_err(call('opencode_cancel_run', { runId => 'run_' . ('a' x 24) }),
             qr/run not found/i, 'cancel unknown run');
    tool_err(call('opencode_cancel_run', {}), qr/runId/, 'cancel without runId');
}

###############################################################################
# list_runs

{
    # more runs, spread over two sessions and statuses
    my $sesB;
    for my $i (1 .. 8) {
        my $a = { task => "bulk $i", title => "bulk $i" };
        $a->{sessionId} = $sesB if $sesB && $i % 2;
        my $s = tool_ok(call('opencode_run_task', $a), "bulk run $i");
        $sesB //= $s->{sessionId};
        $runs{ $s->{runId} } = $a if $s->{runId};
        if ($i % 3 == 0) {
            $t->redis('HSET', "${P}run:$s->{runId}", status => 'failed',
                      finished_at => now_ms(), error => 'boom');
        }
        sleep(0.002) if $i % 4;    # some runs share a millisecond, most do not
    }
    my $total = $t->redis('ZCARD', "${P}runs:alice");
    is($total, scalar keys %runs, "runs:alice holds all $total runs");

    my %created = map { $_ => $t->run_hash($_)->{created_at} } keys %runs;

    # default: newest first, limit 10
    my $sc = tool_ok(call('opencode_list_runs', {}), 'list_runs');
    my @l = @{ $sc->{runs} || [] };
    is(scalar @l, 10, 'default limit 10');
    ok(defined $sc->{nextCursor}, 'nextCursor when more runs exist');
    my $sorted = 1;
    for my $i (1 .. $#l) {
        $sorted = 0 if ($created{ $l[$i]{runId} } // 0) > ($created{ $l[$i - 1]{runId} } // 0);
    }
    ok($sorted, 'newest first');
    for my $k (qw(runId sessionId status title createdAt finishedAt
                  pullRequestUrl pullRequestStatus)) {
        ok(!grep({ !exists $_->{$k} } @l), "every entry has $k");
    }
    my ($e1) = grep { $_->{runId} eq $run1 } @{ (SMCP::Test::sc(call('opencode_list_runs',
                                                 { limit => 100 })) || {})->{runs} || [] };
    is_deeply([ @{ $e1 || {} }{qw(pullRequestUrl pullRequestStatus)} ],
              [ 'https://github.com/acme/widgets/pull/7', 'opened' ],
              "list_runs: run 1's pullRequestUrl and pullRequestStatus");
    ok(!grep({ $_->{runId} ne $run1 && defined $_->{pullRequestUrl} } @l),
       'list_runs: null for runs without one');
    is($l[0]{runId}, (sort { $created{$b} <=> $created{$a} } keys %created)[0],
       'the newest run first');

    # paging through everything
    for my $limit (1, 3, 7, 100) {
        my (@all, $cursor, $pages);
        while (1) {
            my $a = { limit => $limit };
            $a->{cursor} = $cursor if defined $cursor;
            my $res = call('opencode_list_runs', $a);
            my $s = SMCP::Test::sc($res) || {};
            last if SMCP::Test::is_error_result($res);
            push @all, map { $_->{runId} } @{ $s->{runs} || [] };
            ok(@{ $s->{runs} || [] } <= $limit, "page within limit $limit") if !$pages;
            $cursor = $s->{nextCursor};
            last unless defined $cursor;
            last if ++$pages > 100;
        }
        my %seen;
        my @dup = grep { $seen{$_}++ } @all;
        ok(!@dup, "limit $limit: no duplicates");
        is_deeply([ sort @all ], [ sort keys %runs ], "limit $limit: every run exactly once");
    }

    # filters
    my @failed = grep { ($t->run_hash($_)->{status} // '') eq 'failed' } keys %runs;
    $sc = tool_ok(call('opencode_list_runs', { status => 'failed', limit => 100 }),
                  'list_runs status failed');
    is_deeply([ sort map { $_->{runId} } @{ $sc->{runs} || [] } ], [ sort @failed ],
              'status filter');
    ok(!grep({ $_->{status} ne 'failed' } @{ $sc->{runs} || [] }), 'all failed');

    my @started = grep { ($t->run_hash($_)->{status} // '') eq 'started' } keys %runs;
    my (@pg, $cur);
    for (1 .. 50) {
        my $s = SMCP::Test::sc(call('opencode_list_runs', { status => 'started', limit => 2,
                                    defined $cur ? (cursor => $cur) : () })) || {};
        push @pg, map { $_->{runId} } @{ $s->{runs} || [] };
        $cur = $s->{nextCursor};
        last unless defined $cur;
    }
    is_deeply([ sort @pg ], [ sort @started ], 'status filter with paging (limit 2)');

    my @s1 = grep { ($t->run_hash($_)->{session} // '') eq $ses1 } keys %runs;
    $sc = tool_ok(call('opencode_list_runs', { sessionId => $ses1, limit => 100 }),
                  'list_runs sessionId');
    is_deeply([ sort map { $_->{runId} } @{ $sc->{runs} || [] } ], [ sort @s1 ],
              'sessionId filter');
    ok(!grep({ $_->{sessionId} ne $ses1 } @{ $sc->{runs} || [] }), 'all in the session');

    $sc = tool_ok(call('opencode_list_runs', { sessionId => $ses1, status => 'cancelled' }),
                  'list_runs sessionId + status');
    ok(!grep({ $_->{status} ne 'cancelled' || $_->{sessionId} ne $ses1 } @{ $sc->{runs} || [] })
       && @{ $sc->{runs} || [] } >= 1, 'both filters apply');

    $sc = tool_ok(call('opencode_list_runs', { sessionId => $ghost_ses }),
                  'list_runs unknown session');
    is_deeply($sc->{runs}, [], 'unknown session: empty list');

    tool_err(call('opencode_list_runs', { limit => 0 }), qr/limit/, 'limit 0');
    tool_err(call('opencode_list_runs', { limit => 101 }), qr/limit/, 'limit 101');
    tool_err(call('opencode_list_runs', { limit => -1 }), qr/limit/, 'limit -1');
    tool_err(call('opencode_list_runs', { limit => 'ten' }), qr/limit/, 'limit string');
    tool_err(call('opencode_list_runs', { cursor => '!!garbage!!' }), qr/cursor/,
             'bad cursor');
}

###############################################################################
# get_diff

{
    my $section = sub {
        my ($path, $body) = @_;
        return "diff --git a/$path b/$path\nindex 1111111..2222222 100644\n"
             . "--- a/$path\n+++ b/$path\n$body";
    };
    my $a = $section->('a.txt', "\@\@ -1 +1 \@\@\n-old\n+new\n");
    my $big_body = "\@\@ -0,0 +1,5000 \@\@\n";
    for my $i (1 .. 5000) { $big_body .= "+ligne $i: d\xc3\xa9j\xc3\xa0 vu \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\n" }
    my $big = $section->('src/big file.txt', $big_body);
    my $c = $section->('c.txt', "\@\@ -1,2 +1,2 \@\@\n a\n-b\n+c\n");
    my $diff = $a . $big . $c;
    ok(length($diff) > 2 * 65536, 'test diff is over two 64 KiB pages (' . length($diff) . ' bytes)');
    $t->redis('SET', "${P}run:$run1:diff", $diff);

    my @pages = $t->diff_pages($sid, { runId => $run1 });
    my $n = @pages;
    ok($n >= 3, "diff came in $n pages");
    ok(!grep({ length($_->{diff}) > 65536 } @pages), 'every page within 64 KiB ('
       . join(', ', map { length $_->{diff} } @pages) . ')');
    ok(join('', map { $_->{diff} } @pages) eq $diff, 'pages concatenate to the original diff');
    ok(!grep({ (defined $_->{nextCursor} ? 1 : 0) != ($_->{truncated} ? 1 : 0) } @pages),
       'truncated is true exactly when a nextCursor is given');

    my $sc = tool_ok(call('opencode_get_diff', { runId => $run1, path => 'c.txt' }),
                     'get_diff path');
    my $d = $sc->{diff} // '';
    utf8::encode($d);
    is($d, $c, 'path filter returns only that file');
    ok(!$sc->{truncated}, 'small section not truncated');
    ok(!defined $sc->{nextCursor}, 'no nextCursor');
    is($sc->{runId}, $run1, 'runId');

    $sc = tool_ok(call('opencode_get_diff', { runId => $run1, path => 'a.txt' }),
                  'get_diff first file');
    $d = $sc->{diff} // '';
    utf8::encode($d);
    is($d, $a, 'first file section');

    @pages = $t->diff_pages($sid, { runId => $run1, path => 'src/big file.txt' });
    ok(join('', map { $_->{diff} } @pages) eq $big,
       'big file section paged (' . scalar(@pages) . ' pages) and complete');

    $sc = tool_ok(call('opencode_get_diff', { runId => $run1, path => 'no/such/file' }),
                  'get_diff of a path not in the diff');
    is($sc->{diff}, '', 'unknown path: an empty diff');

    $sc = tool_ok(call('opencode_get_diff', { runId => $run2 }), 'get_diff without a diff');
    is($sc->{diff}, '', 'no diff -> empty string');
    ok(!$sc->{truncated}, 'not truncated');

    tool_err(call('opencode_get_diff', { runId => $run1, cursor => 'zzz-bad' }),
             qr/cursor/, 'get_diff bad cursor');
    tool_err(call('opencode_get_diff', { runId => 'run_' . ('b' x 24) }),
             qr/run not found/i, 'get_diff unknown run');
}

###############################################################################
# get_events

{
    my $key = "${P}run:$run1:events";
    # the module may have logged lifecycle events of its own already
    my @ids = map { $_->[0] } @{ $t->redis('XRANGE', $key, '-', '+') || [] };
    my $own = @ids;
    my %data;
    for my $i (1 .. 25) {
        my $type = $i == 1 || $i == 25 ? 'lifecycle' : $i % 5 ? 'agent' : 'egress';
        my $data = json_encode({ n => $i, text => "event $i \x{e9}" });
        my $ts = now_ms();
        my $id = $t->redis('XADD', $key, '*', type => $type, data => $data, ts => $ts);
        push @ids, $id;
        $data{$id} = [ $type, $data, $ts ];
    }

    my $sc = tool_ok(call('opencode_get_events', { runId => $run1 }), 'get_events');
    my @ev = @{ $sc->{events} || [] };
    is(scalar @ev, 25 + $own, "all events ($own + 25, default limit 100)");
    is_deeply([ map { $_->{id} } @ev ], \@ids, 'in stream order, ids = stream ids');
    is($sc->{nextAfter}, $ids[-1], 'nextAfter = last id');
    is($sc->{runId}, $run1, 'runId');
    my ($e) = grep { $_->{id} eq $ids[$own + 4] } @ev;
    $e ||= {};
    my ($type, $data, $ts) = @{ $data{ $ids[$own + 4] } };
    is($e->{type}, $type, 'event type');
    is(iso_ms($e->{time}), $ts, 'event time from ts');
    my $got = ref $e->{data} ? $e->{data} : json_decode($e->{data} // '');
    is_deeply($got, json_decode($data), 'event data');

    my (@seen, $after);
    for my $p (1 .. 10) {
        my $s = tool_ok(call('opencode_get_events', { runId => $run1, limit => 10,
                             defined $after ? (after => $after) : () }), "events page $p");
        my @e = @{ $s->{events} || [] };
        ok(@e <= 10, 'page within limit');
        push @seen, map { $_->{id} } @e;
        last unless @e;
        is($s->{nextAfter}, $e[-1]{id}, "page $p: nextAfter = its last id");
        $after = $s->{nextAfter};
        last if @e < 10;
    }
    is_deeply(\@seen, \@ids, 'after/limit pages through every event once, in order');

    $sc = tool_ok(call('opencode_get_events', { runId => $run1, after => $ids[-1] }),
                  'get_events after the last');
    is_deeply($sc->{events}, [], 'no events after the last one');
    is($sc->{nextAfter}, $ids[-1], 'nextAfter stays at the last id');

    $sc = tool_ok(call('opencode_get_events', { runId => $run1, after => $ids[19], limit => 3 }),
                  'get_events after id 20');
    is_deeply([ map { $_->{id} } @{ $sc->{events} || [] } ], [ @ids[20 .. 22] ],
              'after = exclusive start');

    $t->redis('DEL', "${P}run:$run2:events");
    $sc = tool_ok(call('opencode_get_events', { runId => $run2 }), 'events of a run without any');
    is_deeply($sc->{events}, [], 'empty list');

    tool_err(call('opencode_get_events', { runId => $run1, limit => 0 }), qr/limit/, 'events limit 0');
    tool_err(call('opencode_get_events', { runId => $run1, limit => 1001 }), qr/limit/,
             'events limit 1001');
    tool_err(call('opencode_get_events', { runId => $run1, after => 'garbage' }), qr/after/,
             'events after garbage');
    $sc = tool_ok(call('opencode_get_events', { runId => $run1, limit => 1000 }),
                  'events limit 1000 accepted');
    tool_err(call('opencode_get_events', { runId => 'run_' . ('c' x 24) }),
             qr/run not found/i, 'get_events unknown run');
}

$t->done;
