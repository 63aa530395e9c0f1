#!/usr/bin/env perl
# `make up`'s settings reach every part of the stack that reads them, and
# the documented ones work.
#
# One make up (SMCP::MakeUp: .ci/stack on free ports, the egress in front
# of a fake model) with
#   SMCP_REDIS_PREFIX     both nginx instances (sandbox_mcp_redis_prefix)
#                         and the runner (--prefix): one keyspace, nothing
#                         under smcp:; /healthz sees the runner's heartbeat,
#                         a task runs end to end, `make revoke` finds it
#   SMCP_RUNNER_METRICS=off   the runner runs, without a metrics listener,
#                         never restarted (it exited 2 and its supervisor
#                         restarted it for ever)
#   SMCP_LOG_FORMAT=json  nginx's request lines and the runner's lines
#   no GITHUB_TOKEN       the summary says so; run_task on a repository is
#                         refused at once naming GITHUB_TOKEN
# and a runner that refuses its configuration (SMCP_RUNNER_METRICS=nowhere)
# makes make up fail saying so, not restart it for ever.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);
use SMCP::Docker qw(docker_available test_id);
use SMCP::MakeUp;

my $root = repo_root();

require_prereqs('build/smcp-token, build/smcp-runner and the module (run `make`)')
    unless -x "$root/build/smcp-token" && -x "$root/build/smcp-runner" && -f module_path();
prereq_fail('no Docker engine (make up\'s egress side)') unless docker_available();

my $prefix = 'cfg' . substr(test_id(), -6) . ':';
my $up = SMCP::MakeUp->new(text => 'settings run done', github => 0,
    env => { SMCP_REDIS_PREFIX => $prefix, SMCP_RUNNER_METRICS => 'off',
             SMCP_LOG_FORMAT => 'json' });
my ($state, $port, $rport) = map { $up->$_ } qw(state port rport);

my ($rc, $out) = $up->up;
is($rc, 0, 'make up with SMCP_REDIS_PREFIX, SMCP_RUNNER_METRICS=off, SMCP_LOG_FORMAT=json')
    or diag($out, `tail -20 $state/logs/runner.log 2>/dev/null`);
$ENV{REDISCLI_AUTH} = slurp("$state/redis-password");
sub rcli { my $r = `redis-cli -p $rport --raw @_ 2>&1`; chomp $r; return $r }

# SMCP_REDIS_PREFIX: both nginx instances and the runner
like(slurp("$state/nginx.conf"), qr/^\s*sandbox_mcp_redis_prefix \Q$prefix\E;$/m,
     'nginx.conf: sandbox_mcp_redis_prefix from SMCP_REDIS_PREFIX');
like(slurp("$state/egress.conf"), qr/^\s*sandbox_mcp_redis_prefix \Q$prefix\E;$/m,
     'egress.conf: the same');
my $ps = `ps -eo args`;
like($ps, qr/smcp-runner .*--prefix \Q$prefix\E/, 'the runner: --prefix the same');
is(rcli('GET', "${prefix}egress:routes"), 'inbox anthropic',
   'the egress announced its routes under the prefix');
my ($hz_ok, $hz) = $up->runners_ok(20);
ok($hz_ok, '/healthz (nginx) sees the runner\'s heartbeat: one keyspace') or diag($hz);

# no GitHub token: said, and refused at once
like($out, qr/^  Routes: +anthropic \(no GITHUB_TOKEN: runs on repositories are refused\)$/m,
     'the summary: the routes, and no GitHub token') or diag($out);
my ($token) = $out =~ m{^  Token:\s+(\S+)}m;
my $sid = $up->initialize($token // '');
ok($sid, 'the printed token starts a session');
{
    my $r = $up->post($token, json_encode({ jsonrpc => '2.0', id => 3, method => 'tools/call',
        params => { name => 'opencode_run_task',
                    arguments => { task => 't', repository => 'https://github.com/owner/repo' } } }),
        'Mcp-Session-Id' => $sid);
    my $res = (json_decode($r->{content} // '') // {})->{result} // {};
    ok($res->{isError}, 'run_task on a repository: isError at once');
    like($res->{content}[0]{text} // '', qr/no GitHub route.*sets GITHUB_TOKEN/,
         '... naming GITHUB_TOKEN');
}

# a task through the whole stack, in the prefix's keyspace
my $run = $up->call($token, $sid, 'opencode_run_task', { task => 'Say hello.' });
like($run->{runId} // '', qr/^run_[0-9a-f]{24}$/, 'run_task answers');
my $res = $up->wait_done($token, $sid, $run->{runId} // 'none', 300);
is($res->{status}, 'completed', 'the task completes') or diag(explain($res),
    `tail -20 $state/logs/runner.log`);
is($res->{result}, 'settings run done', '... with the model\'s answer');
ok(rcli('EXISTS', "${prefix}run:$run->{runId}"), '... its run under the prefix');
is(rcli('KEYS', 'smcp:*'), '', 'no key under smcp:');

# SMCP_RUNNER_METRICS=off: no listener, no restart
my $rlog = slurp("$state/logs/runner.log");
is(scalar(() = $rlog =~ /smcp-runner started \(pid/g), 1, 'the runner started once')
    or diag($rlog);
unlike($rlog, qr/exited with status|restarting in/, '... never exited or restarted');
like($out, qr/^  Metrics: +http:\/\/127\.0\.0\.1:$port\/metrics \(egress: [^)]*\)$/m,
     '... and the summary names no runner metrics') or diag($out);

# SMCP_LOG_FORMAT=json: the MCP requests and the runner's lines
ok(wait_until(5, sub { slurp("$state/logs/error.log") =~ /^\{.*"event":"mcp_request"/m }),
   'nginx logs a JSON line per MCP request');
like($rlog, qr/^\{"time":.*"msg":"smcp-runner [^"]* starting: /m, 'the runner logs JSON lines');

# make revoke: the same keyspace
{
    my ($mrc, undef, $err) = run_cmd(['make', '-s', '-C', $root, 'revoke', 'JTI=settings-jti',
                                      "SMCP_STATE=$state", "SMCP_REDIS_PORT=$rport",
                                      "SMCP_REDIS_PREFIX=$prefix"]);
    is($mrc, 0, 'make revoke with SMCP_REDIS_PREFIX') or diag($err);
    is(rcli('HEXISTS', "${prefix}revoked", 'settings-jti'), 1, '... revoked under the prefix');
}

my ($rcd, $dout) = $up->down;
is($rcd, 0, 'make down') or diag($dout);

# a runner that refuses its configuration: make up says so and fails
{
    local $ENV{SMCP_RUNNER_METRICS} = 'nowhere';
    my ($brc, $bout) = $up->up;
    isnt($brc, 0, 'SMCP_RUNNER_METRICS=nowhere: make up fails');
    like($bout, qr/the runner refused its configuration/, '... saying the runner refused it');
    like($bout, qr/--metrics nowhere: want IP:PORT/, '... with the runner\'s words');
    my $l = slurp("$state/logs/runner.log");
    like($l, qr/exited with status 2 after \d+ s: a configuration error/,
         '... and its supervisor stopped, not restarting it');
    ok(!-f "$state/supervisor.pid" || !kill(0, (slurp("$state/supervisor.pid") =~ /(\d+)/)[0] // 0),
       '... no supervisor left');
    $up->down;
}
$up->stop_fakes;

done_testing();
