#!/usr/bin/env perl
# The module's operations endpoints against nginx + redis (no Docker):
# sandbox_mcp_metrics serves valid Prometheus text whose series move with
# MCP calls, long-polls, streams, egress requests and refusals, with label
# values bounded whatever a client sends; sandbox_mcp_health answers 200
# with the runners' heartbeats (none, alive, stale) and 503 without Redis;
# sandbox_mcp_log_format json writes one JSON line per MCP and egress
# request with the run id and tenant and never a token.  The version
# (common/smcp_version.h): /healthz carries it, and the error log has one
# notice line with the module's name and version per start and reload.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(:all);
use SMCP::Metrics qw(parse_metrics metric_value);
use SMCP::UI;

my $t = SMCP::Test->new(workers => 2);

my $eport = $t->free_port;
my $echo = $t->free_port;
my $real = 'sk-REAL-' . rhex();
local $ENV{SMCP_TEST_ECHO_KEY} = $real;

$t->start(http => "    sandbox_mcp_log_format json;\n\n"
                 . egress_echo_conf($eport, $echo), server => <<"SERVER");
        location = /metrics {
            sandbox_mcp_metrics;
        }

        location = /healthz {
            sandbox_mcp_health;
        }

        location /ui/ {
            sandbox_mcp_ui;
        }
SERVER

# the module's line at start and at each reload: its name and version
my $version = smcp_version();
sub start_lines {
    return scalar grep { /\[notice\] \d+#\d+: ngx_http_sandbox_mcp_module \Q$version\E$/ }
                  split /\n/, $t->error_log;
}
wait_until(5, sub { start_lines() });      # (the master writes it)
is(start_lines(), 1, "error log: one notice line at start, "
                     . "\"ngx_http_sandbox_mcp_module $version\"")
    or diag($t->error_log);

# the metrics, parsed (a scrape that is not 200 parses as nothing)
sub scrape {
    my $r = $t->http(method => 'GET', path => '/metrics', timeout => 10);
    return ($r, $r->{status} == 200 ? parse_metrics($r->{body})
                                    : (undef, "status $r->{status}"));
}

sub value { return metric_value(@_) // 0 }

###############################################################################
# the text format

{
    my ($r, $m, $err) = scrape();
    is($r->{status}, 200, 'metrics: 200');
    like($r->{headers}{'content-type'} // '', qr{^text/plain; version=0\.0\.4},
         'metrics: Prometheus text content type');
    ok($m, 'metrics: every line parses') or diag($err);
    for my $name (qw(smcp_mcp_requests_total smcp_http_responses_total
                     smcp_redis_command_duration_seconds
                     smcp_redis_reconnects_total smcp_long_polls smcp_streams
                     smcp_egress_requests_total smcp_egress_bytes_total
                     smcp_egress_refused_total)) {
        ok($m->{types}{$name}, "metrics: # TYPE of $name");
    }

    my $post = $t->http(method => 'POST', path => '/metrics', body => 'x');
    is($post->{status}, 405, 'metrics: POST is refused');
}

###############################################################################
# MCP calls: by method, tool and outcome

my ($sid) = $t->initialize;
ok($sid, 'a session') or SMCP::Test::give_up('no session');

my ($res) = $t->call_tool($sid, 'opencode_run_task', { task => 'metrics' });
my $run = (SMCP::Test::sc($res) || {})->{runId};
ok($run, 'a run started') or diag(json_encode($res));

$t->rpc($sid, 'tools/list', {});
$t->call_tool($sid, 'opencode_no_such_tool', {});

# hostile method and tool names: each its own string, all one series
for my $i (1 .. 40) {
    $t->mcp_post($t->request_msg('x/' . rhex(8), {}), session => $sid);
    $t->mcp_post($t->request_msg('tools/call',
                                 { name => 'evil"}' . rhex(8), arguments => {} }),
                 session => $sid);
}

$t->mcp_post({ jsonrpc => '2.0', id => 1, method => 'ping' }, token => undef);

# a request is counted at its log phase, which may come just after the
# client read the answer: scrape until the last ones are in
sub settled {
    my ($cond) = @_;
    my $m;
    wait_until(30, sub { (undef, $m) = scrape(); return $cond->($m) }, 0.1);
    return $m;
}

{
    my $m = settled(sub {
        value($_[0], 'smcp_http_responses_total', { endpoint => 'mcp', status => '4xx' }) >= 1
    });
    is(value($m, 'smcp_mcp_requests_total',
             { method => 'initialize', tool => '', status => 'ok' }), 1,
       'initialize: 1 ok');
    is(value($m, 'smcp_mcp_requests_total',
             { method => 'tools/call', tool => 'opencode_run_task',
               status => 'ok' }), 1, 'tools/call run_task: 1 ok');
    is(value($m, 'smcp_mcp_requests_total',
             { method => 'tools/list', tool => '', status => 'ok' }), 1,
       'tools/list: 1 ok');
    is(value($m, 'smcp_mcp_requests_total',
             { method => 'other', tool => '', status => 'error' }), 40,
       'unknown methods: one series "other", 40 errors');
    is(value($m, 'smcp_mcp_requests_total',
             { method => 'tools/call', tool => 'other', status => 'error' }), 41,
       'unknown tools: one series "other", 41 errors');
    my @series = grep { $_->{name} eq 'smcp_mcp_requests_total' } @{ $m->{samples} };
    ok(@series <= 6, scalar(@series) . ' series of smcp_mcp_requests_total');
    ok(!grep({ $_->{line} =~ /evil/ } @{ $m->{samples} }),
       'no client string is a label value');
    ok(value($m, 'smcp_http_responses_total', { endpoint => 'mcp', status => '4xx' }) >= 1,
       'the 401 without a token counted as 4xx');
    ok(value($m, 'smcp_http_responses_total', { endpoint => 'mcp', status => '2xx' }) >= 84,
       'the answered calls counted as 2xx');

    my $count = value($m, 'smcp_redis_command_duration_seconds_count', {});
    ok($count > 0, "redis latency histogram: $count commands");
    is(value($m, 'smcp_redis_command_duration_seconds_bucket', { le => '+Inf' }),
       $count, 'histogram: +Inf bucket = count');
    my @le = grep { $_->{name} eq 'smcp_redis_command_duration_seconds_bucket' }
             @{ $m->{samples} };
    my $mono = 1;
    $mono &&= $le[$_]{value} >= $le[$_ - 1]{value} for 1 .. $#le;
    ok($mono && @le > 5, 'histogram: buckets cumulative');
}

###############################################################################
# a long-poll and a stream are gauges while they last

{
    # a wait far longer than the scrapes that look for it; its client ends it
    my $lp = $t->mcp_start($t->request_msg('tools/call', {
        name => 'opencode_get_result',
        arguments => { runId => $run, waitSeconds => 60 } }), session => $sid);
    my $seen = wait_until(30, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_long_polls', {}) == 1;
    }, 0.2);
    ok($seen, 'smcp_long_polls is 1 while a get_result waits');
    close $lp->{sock} if $lp->{sock};
    $seen = wait_until(30, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_long_polls', {}) == 0;
    }, 0.2);
    ok($seen, 'smcp_long_polls back to 0 once the call ended (its client left)');

    my $st = $t->http_start(method => 'GET', path => '/mcp',
                            headers => $t->mcp_headers(session => $sid,
                                                       accept => 'text/event-stream'));
    $seen = wait_until(30, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_streams', { kind => 'mcp' }) == 1;
    }, 0.2);
    ok($seen, 'smcp_streams{kind="mcp"} is 1 while a GET stream is open');
    close $st->{sock} if $st->{sock};
    $seen = wait_until(30, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_streams', { kind => 'mcp' }) == 0;
    }, 0.2);
    ok($seen, 'smcp_streams{kind="mcp"} back to 0 once the client left');
}

# a dashboard event stream
{
    my $ui = SMCP::UI->new($t);
    my $cookie = 'smcp_ui=' . $t->token(scope => 'ui', repos => undef);
    my $sse = $ui->sse("/ui/runs/$run/events", cookie => $cookie);
    my $seen = wait_until(30, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_streams', { kind => 'dashboard' }) == 1;
    }, 0.2);
    ok($seen, 'smcp_streams{kind="dashboard"} is 1 while a dashboard stream is open');
    $sse->close;
    $seen = wait_until(30, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_streams', { kind => 'dashboard' }) == 0;
    }, 0.2);
    ok($seen, 'smcp_streams{kind="dashboard"} back to 0 once it closed');
    # counted at the request's log phase, which may come after the stream
    # gauge went down
    ok(wait_until(10, sub {
        my (undef, $m) = scrape();
        return value($m, 'smcp_http_responses_total', { endpoint => 'ui', status => '2xx' }) >= 1;
    }, 0.2), 'the dashboard request counted (endpoint ui)');
}

###############################################################################
# egress: requests and bytes by route and status, refusals by reason

my ($erun, $etok) = $t->live_run;
{
    my $r = $t->http(port => $eport, method => 'POST', path => '/echo/x',
                     headers => [ Authorization => "Bearer $etok" ], body => 'hello');
    is($r->{status}, 200, 'egress: 200 through the echo route');
    $r = $t->http(port => $eport, method => 'GET', path => '/echo/x');
    is($r->{status}, 401, 'egress: no token, refused');
    $r = $t->http(port => $eport, method => 'GET', path => '/echo/x',
                  headers => [ Authorization => 'Bearer not.a.token' ]);
    is($r->{status}, 401, 'egress: a bad token, refused');

    my $m = settled(sub {
        value($_[0], 'smcp_egress_requests_total', { route => 'echo', status => '4xx' }) >= 2
    });
    is(value($m, 'smcp_egress_requests_total', { route => 'echo', status => '2xx' }), 1,
       'egress: 1 request 2xx on route echo');
    is(value($m, 'smcp_egress_requests_total', { route => 'echo', status => '4xx' }), 2,
       'egress: 2 requests 4xx on route echo');
    ok(value($m, 'smcp_egress_bytes_total',
             { route => 'echo', status => '2xx', direction => 'in' }) > 5,
       'egress: bytes in counted');
    ok(value($m, 'smcp_egress_bytes_total',
             { route => 'echo', status => '2xx', direction => 'out' }) > 6,
       'egress: bytes out counted');
    is(value($m, 'smcp_egress_refused_total', { reason => 'authentication_error' }), 2,
       'egress: 2 refused for authentication');
}

###############################################################################
# a reload keeps the counters (the zone is the same)

{
    my (undef, $m) = scrape();
    my $n = value($m, 'smcp_mcp_requests_total',
                  { method => 'tools/call', tool => 'other', status => 'error' });
    ok($t->reload, 'nginx reloaded (new workers)');
    is(start_lines(), 2, '... and the error log has the module\'s line again');
    (undef, $m) = scrape();
    is(value($m, 'smcp_mcp_requests_total',
             { method => 'tools/call', tool => 'other', status => 'error' }), $n,
       "the counters survive the reload ($n)");
}

###############################################################################
# /healthz: Redis and the runners' heartbeats

sub health {
    my $r = $t->http(method => 'GET', path => '/healthz', timeout => 10);
    return ($r, json_decode($r->{body}) // {});
}

{
    my ($r, $j) = health();
    is($r->{status}, 200, 'healthz: 200');
    like($r->{headers}{'content-type'} // '', qr{^application/json}, 'healthz: JSON');
    is($j->{version}, $version, "healthz: the version ($version)");
    is($j->{redis}, 'ok', 'healthz: redis ok');
    is($j->{runners}, 'none', 'healthz: no runner heartbeat yet');
    is($j->{heartbeatAgeMs}, undef, 'healthz: no heartbeat age');

    $t->redis('ZADD', 'smcp:runners', now_ms() - 1000, 'host-a');
    ($r, $j) = health();
    is($j->{runners}, 'ok', 'healthz: a fresh heartbeat: runners ok');
    is($j->{runnersAlive}, 1, 'healthz: 1 runner alive');
    ok(defined $j->{heartbeatAgeMs} && $j->{heartbeatAgeMs} >= 1000
       && $j->{heartbeatAgeMs} < 30000, "healthz: heartbeat age $j->{heartbeatAgeMs} ms");

    $t->redis('ZADD', 'smcp:runners', now_ms() - 120_000, 'host-a');
    ($r, $j) = health();
    is($r->{status}, 200, 'healthz: stale runners: still 200 (nginx is fine)');
    is($j->{runners}, 'stale', 'healthz: stale heartbeat reported');
    is($j->{runnersAlive}, 0, 'healthz: 0 runners alive');
    ok($j->{heartbeatAgeMs} >= 120_000, 'healthz: its age');

    $t->stop_redis;
    ($r, $j) = health();
    is($r->{status}, 503, 'healthz: Redis down: 503');
    is($j->{status}, 'unavailable', 'healthz: status unavailable');
    is($j->{version}, $version, '... with the version');

    $t->start_redis;
    ok(wait_until(15, sub { (health())[0]{status} == 200 }, 0.3),
       'healthz: 200 again once Redis is back');
    my (undef, $m) = scrape();
    ok(value($m, 'smcp_redis_reconnects_total', {}) >= 1,
       'redis reconnects counted');
}

###############################################################################
# JSON log lines

{
    my $log = $t->error_log;
    my @lines = grep { /^\{/ } split /\n/, $log;
    ok(@lines > 80, scalar(@lines) . ' JSON lines in error.log');
    my @bad = grep { !defined json_decode($_) } @lines;
    ok(!@bad, 'every JSON line parses') or diag($bad[0]);
    my @j = map { json_decode($_) } @lines;

    my ($start) = grep { ($_->{event} // '') eq 'mcp_request'
                         && ($_->{runId} // '') eq ($run // '-') } @j;
    ok($start, 'the run_task request has its line with the run id');
    is($start && $start->{tenant}, 'alice', 'with the tenant');
    ok($start && $start->{time} && $start->{status} == 200, 'time and status');

    my ($eg) = grep { ($_->{event} // '') eq 'egress' && $_->{status} == 200 } @j;
    ok($eg, 'an egress line');
    is($eg && $eg->{runId}, $erun, 'egress line: run id');
    is($eg && $eg->{tenant}, 'alice', 'egress line: tenant');
    is($eg && $eg->{route}, 'echo', 'egress line: route');

    my $tok = $t->token;
    unlike($log, qr/\Q$tok\E/, 'the MCP bearer token is never logged');
    unlike($log, qr/\Q$etok\E/, 'the egress token is never logged');
    unlike($log, qr/\Q$real\E/, 'the real credential is never logged');
    unlike($log, qr/\Q$sid\E/, 'the MCP session id is never logged');
}

$t->done;
