#!/usr/bin/env perl
# `make up` / `make down` and the token CLI: the README's quick start.
#
# Starts the local stack in a temp state dir on free ports, mints a token
# with `make token`, drives the printed MCP URL with it, then `make down`
# stops exactly the processes `make up` started.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use SMCP::Test qw(:all);

my $root = repo_root();

if (!-x "$root/build/smcp-token" || !-f module_path()) {
    plan(skip_all => 'build first (make)') unless is_ci();
    fail('build/smcp-token and the module are built');
    done_testing();
    exit;
}

my $state = tempdir('smcp-stack-XXXXXX', TMPDIR => 1,
                    CLEANUP => !$ENV{SMCP_TEST_KEEP});
my $port = SMCP::Test::free_port();
my $rport = SMCP::Test::free_port();

local $ENV{SMCP_STATE} = $state;
local $ENV{SMCP_LISTEN} = "127.0.0.1:$port";
local $ENV{SMCP_REDIS_PORT} = $rport;
local $ENV{SMCP_TENANT} = 'stack-tenant';
delete local $ENV{PROXY_JWT_SECRET};

# `make up` also runs `make deps`; .ci/stack is what it calls after that
my $out = `$root/.ci/stack up 2>&1`;
is($?, 0, 'stack up exits 0') or diag($out);

my ($url) = $out =~ m{MCP URL:\s+(\S+)};
my ($token) = $out =~ m{Token:\s+(\S+)};
is($url, "http://127.0.0.1:$port/mcp", 'prints the MCP URL');
like($token // '', qr/^[\w-]+\.[\w-]+\.[\w-]+$/, 'prints a bearer token');

ok(-s "$state/secret", 'a secret was generated');
my $nginx_pid = SMCP::Test::read_file(undef, "$state/nginx.pid") // '';
my $redis_pid = SMCP::Test::read_file(undef, "$state/redis.pid") // '';
chomp($nginx_pid, $redis_pid);
ok($nginx_pid =~ /^\d+$/ && kill(0, $nginx_pid), 'nginx runs');
ok($redis_pid =~ /^\d+$/ && kill(0, $redis_pid), 'redis-server runs');

sub post {
    my ($tok, $body, %h) = @_;
    return HTTP::Tiny->new(timeout => 10)->post($url, {
        headers => {
            'Authorization' => "Bearer $tok",
            'Accept' => 'application/json, text/event-stream',
            'Content-Type' => 'application/json',
            %h,
        },
        content => $body,
    });
}

require HTTP::Tiny;

my $init = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
    . '{"protocolVersion":"2025-11-25","capabilities":{},'
    . '"clientInfo":{"name":"stack.t","version":"1"}}}';

my $r = post($token, $init);
is($r->{status}, 200, 'the printed token initializes a session');
my $sid = $r->{headers}{'mcp-session-id'} // '';
like($sid, qr/^[0-9a-f]{64}$/, 'session id issued');

my $secret_file = "$state/secret";
my $tok3 = `$root/build/smcp-token --sub carol --ttl 600 --secret-file $secret_file`;
chomp $tok3;
is(post($tok3, $init)->{status}, 200, 'smcp-token --secret-file token accepted');

my (undef, $claims) = SMCP::Test::decode_jwt($tok3);
is($claims->{sub}, 'carol', 'token sub is the tenant');
ok($claims->{exp} > time() + 500 && $claims->{exp} <= time() + 601,
   'token exp honours --ttl');
is($claims->{scope}, 'mcp', 'token scope defaults to mcp');

my $bad = `$root/build/smcp-token --sub x --scope admin --secret-file $secret_file 2>&1`;
isnt($? >> 8, 0, 'smcp-token refuses an unknown scope');
my $nosecret = `env -u PROXY_JWT_SECRET $root/build/smcp-token --sub x 2>&1`;
like($nosecret, qr/PROXY_JWT_SECRET/, 'smcp-token without a secret says where it looks');

# a second `up` is idempotent: same processes, reloaded config
$out = `$root/.ci/stack up 2>&1`;
is($?, 0, 'second stack up exits 0') or diag($out);
my $nginx_pid2 = SMCP::Test::read_file(undef, "$state/nginx.pid") // '';
chomp $nginx_pid2;
is($nginx_pid2, $nginx_pid, 'second up keeps the same nginx master');

$out = `$root/.ci/stack down 2>&1`;
is($?, 0, 'stack down exits 0') or diag($out);
ok(wait_until(10, sub { !kill(0, $nginx_pid) }), 'nginx stopped');
ok(wait_until(10, sub { !kill(0, $redis_pid) }), 'redis-server stopped');

my $log = SMCP::Test::read_file(undef, "$state/logs/error.log") // '';
unlike($log, qr/\[(alert|crit|emerg)\]/, 'no alert/crit/emerg in the stack error.log');
unlike($log, qr/\Q$token\E/, 'the token never appears in the log');

done_testing();
