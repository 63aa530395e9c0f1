#!/usr/bin/env perl
# docker-compose.yml for real: the images build (from the locally made
# Debian base, no registry), the stack starts under a unique project name,
# the MCP endpoint answers on the published port, runs land in the Redis
# container, and a sandbox container on the compose `sandbox` network
# reaches the egress proxy (which swaps its run token for the real key) and
# nothing else: not the host, not Redis, not the MCP listener, not an
# outside container, not DNS.
#
# Needs a Docker engine and docker-compose (v1); skipped without them,
# a failure under CI=true.  The first build of the images takes about a
# minute (apt in the build); later runs reuse Docker's build cache.
#
# Environment: SMCP_TEST_KEEP=1 leaves the stack up (project name printed),
# SMCP_TEST_IMAGE (base image, default smcp-base:bookworm).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Docker qw(:all);
use SMCP::Test qw(json_decode repo_root is_ci wait_until);
use SMCP::Fakes;

my $t0 = time();
my $root = repo_root();

##############################################################################
# prerequisites

my $compose_bin = do {
    my $found;
    for my $d (split(/:/, $ENV{PATH} // ''), qw(/usr/local/bin /usr/bin)) {
        next unless length $d;
        if (-x "$d/docker-compose") { $found = "$d/docker-compose"; last }
    }
    $found;
};
unless ($compose_bin) {
    my $msg = 'docker-compose missing (apt-get install docker-compose; .ci/install-deps)';
    if (is_ci()) {
        plan(tests => 1);
        fail("prerequisites under CI: $msg");
        exit 1;
    }
    plan(skip_all => $msg);
}
ensure_docker();

sub rnd_hex { return join '', map { sprintf '%02x', int(rand(256)) } 1 .. $_[0] }

# project names carry our PID, so leftovers of a killed run can be swept
my $project = sprintf('smcpt%dr%s', $$, rnd_hex(3));
my $base = base_image();
my $secret = rnd_hex(32);
my $real_key = 'sk-ant-api03-' . rnd_hex(24) . '-REALKEY';
my $tenant = 'alice';

# compose reads its settings from the environment, for every command
# (`down` included); provider settings of the caller must not leak in
delete @ENV{ grep { /^(ANTHROPIC|OPENAI|AZURE_OPENAI|GOOGLE|CF_AIG|COMPAT|GITHUB)_/
                    || /^SMCP_(ALLOWED|PUBLIC|WORKERS|LOG_LEVEL|LISTEN)/ } keys %ENV };
$ENV{SMCP_BASE_IMAGE} = $base;
# test-only tags: a real deployment's smcp-*:local built from
# debian:bookworm-slim is never replaced by an image built on the test base
$ENV{SMCP_NGINX_IMAGE} = 'smcp-nginx:test';
$ENV{SMCP_REDIS_IMAGE} = 'smcp-redis:test';
$ENV{PROXY_JWT_SECRET} = $secret;
$ENV{COMPOSE_INTERACTIVE_NO_CLI} = 1;
delete $ENV{COMPOSE_FILE};
delete $ENV{COMPOSE_PROJECT_NAME};

sub compose_cmd {
    my ($name, $args, %o) = @_;
    return run_cmd([$compose_bin, '--ansi', 'never', '-f', "$root/docker-compose.yml",
                    '-p', $name, @$args], timeout => $o{timeout} // 120,
                   (defined $o{stdin} ? (stdin => $o{stdin}) : ()));
}
sub compose { return compose_cmd($project, @_) }

# stacks of earlier runs of this file whose process is gone (a zombie
# counts as gone: PID 1 may take a while to reap a test killed with -9)
sub pid_alive {
    my ($pid) = @_;
    return 0 unless kill(0, $pid);
    open(my $fh, '<', "/proc/$pid/stat") or return 1;
    my $stat = <$fh> // '';
    close $fh;
    return $stat =~ /^\d+ \(.*\) Z /s ? 0 : 1;
}

sub sweep_stale_projects {
    my %seen;
    for my $kind (['ps', '-a'], ['network', 'ls'], ['volume', 'ls']) {
        my (undef, $out) = docker(@$kind, '--filter', 'label=com.docker.compose.project',
                                  '--format', '{{.Label "com.docker.compose.project"}}');
        $seen{$_} = 1 for split ' ', $out;
    }
    for my $p (sort keys %seen) {
        my ($pid) = $p =~ /^smcpt(\d+)r[0-9a-f]+$/ or next;
        next if $pid == $$ || pid_alive($pid);
        # the dead run's own containers still attached to the project's
        # networks would make `down` fail
        my (undef, $nets) = docker('network', 'ls', '-q', '--filter',
                                   "label=com.docker.compose.project=$p");
        for my $net (split ' ', $nets) {
            my (undef, $names) = docker('network', 'inspect', '--format',
                '{{range .Containers}}{{.Name}} {{end}}', $net);
            my @strays = grep { !/^\Q$p\E_/ } split ' ', $names;
            docker({ timeout => 60 }, 'rm', '-f', '-v', @strays) if @strays;
        }
        my ($rc, $out, $err) = compose_cmd($p, ['down', '-v', '--remove-orphans',
                                                '-t', '1']);
        diag("swept stale compose project $p" . ($rc ? ": $err" : ''));
    }
}
sweep_stale_projects();

my @my_containers;     # removed before `down` (they hold the sandbox network)
my $stack_started = 0;

END {
    my $status = $?;
    if ($stack_started && $ENV{SMCP_TEST_KEEP}) {
        print STDERR "# SMCP_TEST_KEEP: compose project $project left up "
                   . "(docker-compose -p $project down -v)\n";
    } elsif ($stack_started) {
        if ($status != 0 || !Test::More->builder->is_passing) {
            my (undef, $logs) = compose(['logs', '--no-color', '--tail', '40'],
                                        timeout => 30);
            print STDERR map { "# $_\n" } split /\n/, $logs;
        }
        remove_container($_) for @my_containers;
        my ($rc, $out, $err) = compose(['down', '-v', '--remove-orphans', '-t', '5'],
                                       timeout => 120);
        print STDERR "# docker-compose down failed: $err\n" if $rc != 0;
        # belt and braces: anything of the project still there
        for my $kind (['ps', '-aq'], ['network', 'ls', '-q'], ['volume', 'ls', '-q']) {
            my (undef, $ids) = docker(@$kind, '--filter',
                                      "label=com.docker.compose.project=$project");
            my @ids = split ' ', $ids or next;
            my @rm = $kind->[0] eq 'ps' ? ('rm', '-f', '-v')
                   : ($kind->[0], 'rm');
            docker({ timeout => 60 }, @rm, @ids);
        }
    }
    $? = $status;
}

##############################################################################
# the fake Anthropic API on the host, where nginx's container reaches it
# through docker0's address (an ordinary network's way out)

my $docker0 = { network_gateway('bridge') }->{gateway};
ok($docker0, "docker0's address is known: " . ($docker0 // '-'))
    or BAIL_OUT('no docker0 address: the fake upstream has nowhere to listen');
my $anthropic = SMCP::Fakes::start_anthropic(addr => $docker0, key => $real_key,
                                             text => 'hello from the fake');
$ENV{ANTHROPIC_API_KEY} = $real_key;
$ENV{ANTHROPIC_BASE_URL} = $anthropic->url;

# the published MCP port
my $port = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1, ReuseAddr => 1)
        or die "bind: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};
$ENV{SMCP_LISTEN} = "127.0.0.1:$port";

##############################################################################
# build and start

{
    my $t = time();
    my ($rc, $out, $err) = compose(['build'], timeout => 900);
    my $dt = time() - $t;
    is($rc, 0, sprintf('docker-compose build (%.1f s)', $dt))
        or diag(substr("$out$err", -4000));
    note(sprintf('build took %.1f s', $dt));

    $t = time();
    $stack_started = 1;    # from here on END takes it down, even half up
    ($rc, $out, $err) = compose(['up', '-d'], timeout => 300);
    $dt = time() - $t;
    is($rc, 0, sprintf('docker-compose up -d (%.1f s)', $dt))
        or BAIL_OUT("docker-compose up failed: $out$err");
}

my $nginx_id = do { my (undef, $o) = compose(['ps', '-q', 'nginx']); chomp $o; $o };
my $redis_id = do { my (undef, $o) = compose(['ps', '-q', 'redis']); chomp $o; $o };

# the harness's client half (HTTP, MCP, JWT) pointed at the published port;
# nothing of it is started (new() would want a host redis and nginx)
my $mcp = bless { port => $port, secret => $secret, tenant => $tenant,
                  reqid => 0, nginx => {}, pids => {}, owner_pid => 0 },
                'SMCP::Test';

# a token from the image's own smcp-token (PROXY_JWT_SECRET of the container)
my $token = do {
    my ($rc, $out, $err) = compose(['exec', '-T', 'nginx', 'smcp-token',
                                    '--sub', $tenant, '--ttl', '3600']);
    is($rc, 0, 'smcp-token in the nginx container mints a token') or diag($err);
    chomp $out;
    $out;
};
like($token, qr/^[\w-]+\.[\w-]+\.[\w-]+$/, '... a JWT');

my ($sid, $init);
wait_until(60, sub {
    ($sid, $init) = $mcp->initialize(token => $token);
    return $sid;
}, 0.5);
is($init->{status}, 200, "MCP initialize on the published port 127.0.0.1:$port")
    or diag(explain($init));
ok($sid, '... gives a session id');
is($init->{json}{result}{serverInfo}{name}, 'sandbox-mcp', '... from sandbox-mcp');

{
    my $r = $mcp->rpc($sid, 'tools/list', {}, token => $token,
                      version => $init->{json}{result}{protocolVersion});
    is($r->{status}, 200, 'tools/list: 200');
    my %tools = map { $_->{name} => 1 } @{ $r->{json}{result}{tools} || [] };
    ok($tools{$_}, "tools/list has $_") for qw(opencode_run_task opencode_get_result
                                               opencode_list_runs);

    $r = $mcp->mcp_post($mcp->request_msg('tools/list', {}), token => 'x.y.z');
    is($r->{status}, 401, 'a bad token gets 401');
    $r = $mcp->mcp_post($mcp->request_msg('tools/list', {}), token => $token,
                        host => "evil.example:$port");
    ok($r->{status} == 403 || $r->{status} == 421 || $r->{status} == 400,
       "a foreign Host is refused ($r->{status})");
}

{
    my ($rc, $out) = compose(['port', 'nginx', '8080']);
    is($out, "127.0.0.1:$port\n", 'nginx publishes 8080 on 127.0.0.1');
    is(container_inspect_field($nginx_id, '{{json .HostConfig.PortBindings}}'),
       qq({"8080/tcp":[{"HostIp":"127.0.0.1","HostPort":"$port"}]}),
       '... and nothing else (the egress port is not published)');
    is(container_inspect_field($redis_id, '{{json .HostConfig.PortBindings}}'), '{}',
       'redis publishes nothing');
}

##############################################################################
# a run, in the Redis container

sub redis_cli {
    my (@args) = @_;
    my ($rc, $out, $err) = compose(['exec', '-T', 'redis', 'redis-cli', '--no-raw', @args],
                                   timeout => 30);
    return $rc == 0 ? $out : "ERROR rc=$rc $err";
}
sub redis_raw {
    my (@args) = @_;
    my ($rc, $out, $err) = compose(['exec', '-T', 'redis', 'redis-cli', '--raw', @args],
                                   timeout => 30);
    chomp $out;
    return $rc == 0 ? $out : "ERROR rc=$rc $err";
}

my $run;
{
    my $res = $mcp->call_tool($sid, 'opencode_run_task',
        { task => 'say hello', title => 'compose test' }, token => $token);
    $run = ($res->{structuredContent} // {})->{runId};
    ok($run, 'opencode_run_task gives a runId') or diag(explain($res));
    is($res->{structuredContent}{status}, 'started', '... status started');
    $run //= 'none';

    is(redis_raw('HGET', "smcp:run:$run", 'status'), 'started',
       'the run is in the Redis container (smcp:run:<id> status started)');
    is(redis_raw('HGET', "smcp:run:$run", 'tenant'), $tenant, '... tenant alice');
    like(redis_cli('XRANGE', 'smcp:queue', '-', '+'), qr/\Q$run\E/,
         '... and queued for a runner (smcp:queue)');
    is(redis_raw('CONFIG', 'GET', 'appendonly'), "appendonly\nyes",
       'redis runs with appendonly yes');
    like(redis_raw('CONFIG', 'GET', 'dir'), qr{^dir\n/data$}, '... in /data');
}

##############################################################################
# the sandbox

my $sandbox_net = do {
    my (undef, $out) = docker('network', 'ls', '--format', '{{.Name}}',
        '--filter', "label=com.docker.compose.project=$project",
        '--filter', 'label=com.docker.compose.network=sandbox');
    (split ' ', $out)[0];
};
ok($sandbox_net, 'the compose sandbox network exists: ' . ($sandbox_net // '-'))
    or BAIL_OUT('no sandbox network');
my $backend_net = "${project}_backend";

is(container_inspect_field($sandbox_net, '{{.Internal}} '
       . '{{index .Options "com.docker.network.bridge.inhibit_ipv4"}} '
       . '{{index .Options "com.docker.network.bridge.enable_icc"}}') // '',
   'true true true', 'sandbox network: internal, inhibit_ipv4, icc on');

# DnsOptions as the runner sets them: without them a lookup of an outside
# name hangs ~20 s (Docker's resolver cannot forward it) before failing
my $sb = run_container(sandbox => 1, network => $sandbox_net,
                       memory => '256m', pids_limit => 128,
                       dns_options => ['timeout:1', 'attempts:1'],
                       cmd => ['sleep', 'infinity']);
push @my_containers, $sb;
is(container_inspect_field($sb, '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} '
       . '{{json .HostConfig.CapDrop}} {{json .HostConfig.SecurityOpt}}'),
   '1000:1000 true ["ALL"] ["no-new-privileges"]',
   'sandbox: user 1000, read-only root, no capabilities, no-new-privileges');

my $nginx_sandbox_ip = container_ip($nginx_id, $sandbox_net);
my $nginx_backend_ip = container_ip($nginx_id, $backend_net);
my $redis_ip = container_ip($redis_id, $backend_net);
my $backend_gw = { network_gateway($backend_net) }->{gateway};
my $sandbox_gw = { network_gateway($sandbox_net) }->{gateway};
note("nginx $nginx_sandbox_ip (sandbox) $nginx_backend_ip (backend), redis $redis_ip, "
     . "backend gateway " . ($backend_gw // '-') . ', sandbox gateway ' . ($sandbox_gw // '-'));

{
    my ($rc, $out, $err) = exec_in($sb, ['getent', 'hosts', 'egress'], timeout => 10);
    like($out, qr/^\Q$nginx_sandbox_ip\E\s+egress/, "'egress' resolves to nginx on the sandbox network")
        or diag("rc=$rc $out$err");
}

# the egress proxy: run token in, real key out
my $egress_tok = $mcp->token(sub => $tenant, scope => 'egress', run => $run,
                             exp => int(CORE::time()) + 600);
my $msg = '{"model":"claude-sonnet-4-5","max_tokens":64,'
        . '"messages":[{"role":"user","content":"hi"}]}';
{
    my ($rc, $out, $err) = exec_in($sb, ['curl', '-sS', '--max-time', '20',
        '-o', '/tmp/body', '-w', '%{http_code}',
        '-H', "x-api-key: $egress_tok", '-H', 'anthropic-version: 2023-06-01',
        '-H', 'content-type: application/json', '--data-binary', $msg,
        'http://egress:8090/anthropic/v1/messages'], timeout => 30);
    is($out, '200', 'sandbox: POST http://egress:8090/anthropic/v1/messages -> 200')
        or diag("rc=$rc $out$err");
    my (undef, $body) = exec_in($sb, ['cat', '/tmp/body']);
    my $j = json_decode($body);
    is(ref $j eq 'HASH' ? $j->{content}[0]{text} : undef, 'hello from the fake',
       "... the fake's answer") or diag($body);

    my $req = $anthropic->last_request(path => '/v1/messages');
    is($req && $req->{headers}{'x-api-key'}, $real_key, 'the fake saw the real key');
    ok($req && !grep({ index($_->[1], $egress_tok) >= 0 } @{ $req->{header_list} }),
       '... and never the run token');

    ($rc, $out, $err) = exec_in($sb, ['curl', '-sS', '--max-time', '10', '-o', '/dev/null',
        '-w', '%{http_code}', '-H', 'x-api-key: not-a-token',
        '--data-binary', $msg, 'http://egress:8090/anthropic/v1/messages'], timeout => 20);
    is($out, '401', 'sandbox: a bad token gets 401 from the proxy') or diag("$out$err");

    ok(wait_until(10, sub { redis_cli('XRANGE', "smcp:run:$run:events", '-', '+')
                                =~ /egress/ }, 0.5),
       'the request is audited in the run\'s event stream');
}

# probe($cid, $host, $port): a TCP connect from inside the container
sub probe {
    my ($cid, $host, $p, $t) = @_;
    $t //= 3;
    my ($rc, $out, $err) = exec_in($cid, ['bash', '-c',
        'timeout "$3" bash -c '
      . q{'exec 3<>"/dev/tcp/$1/$2"' x "$1" "$2" 2>&1 && echo CONNECTED},
        'probe', $host, $p, $t], timeout => $t + 10);
    return { connected => ($out =~ /CONNECTED/ ? 1 : 0), out => "rc=$rc $out$err" };
}

# the things the sandbox must not reach, each with a control showing it is
# really there
my ($host_pid, $host_port) = tcp_listener(addr => '0.0.0.0', port => 0,
                                          reply => "smcp-host-listener\n");
my $outside_net = create_network();
my $outside = run_container(network => $outside_net->{name},
    cmd => ['git', 'daemon', '--export-all', '--base-path=/tmp',
            '--listen=0.0.0.0', '--port=9418', '--reuseaddr']);
push @my_containers, $outside;
my $outside_ip = container_ip($outside, $outside_net->{name});
my $host_ip = do {
    my (undef, $r) = run_cmd(['ip', '-4', '-o', 'route', 'show', 'default']);
    my ($dev) = $r =~ /\bdev (\S+)/;
    my $a = '';
    (undef, $a) = run_cmd(['ip', '-4', '-o', 'addr', 'show', 'dev', $dev]) if $dev;
    ($a =~ /inet (\d+\.\d+\.\d+\.\d+)/)[0];
};

# controls
{
    ok(probe($outside, $docker0, $host_port)->{connected},
       "control: an ordinary container reaches the host listener ($docker0:$host_port)");
    ok(wait_until(15, sub { probe($outside, $outside_ip, 9418)->{connected} }, 0.3),
       "control: the outside stand-in listens on $outside_ip:9418");
    my ($rc, $out, $err) = compose(['exec', '-T', 'nginx', 'bash', '-c',
        'exec 3<>/dev/tcp/redis/6379 && echo CONNECTED'], timeout => 20);
    like($out, qr/CONNECTED/, 'control: nginx reaches redis:6379') or diag("$out$err");
    ($rc, $out, $err) = compose(['exec', '-T', 'nginx', 'bash', '-c',
        "exec 3<>/dev/tcp/$nginx_backend_ip/8080 && echo CONNECTED"], timeout => 20);
    like($out, qr/CONNECTED/, "control: the MCP listener is up on $nginx_backend_ip:8080")
        or diag("$out$err");
}

# the sandbox
{
    my @host_addrs = grep { defined && length } ($docker0, $backend_gw, $sandbox_gw, $host_ip);
    my %seen;
    for my $ip (grep { !$seen{$_}++ } @host_addrs) {
        my $p = probe($sb, $ip, $host_port);
        ok(!$p->{connected}, "sandbox: the host listener via $ip:$host_port is NOT reachable")
            or diag($p->{out});
    }
    my $p = probe($sb, $docker0, $anthropic->port);
    ok(!$p->{connected}, 'sandbox: the real upstream (fake on the host) is NOT reachable directly')
        or diag($p->{out});

    $p = probe($sb, 'redis', 6379);
    ok(!$p->{connected}, 'sandbox: redis:6379 is NOT reachable') or diag($p->{out});
    $p = probe($sb, $redis_ip, 6379);
    ok(!$p->{connected}, "sandbox: redis by its address $redis_ip:6379 is NOT reachable")
        or diag($p->{out});

    $p = probe($sb, 'egress', 8080);
    ok(!$p->{connected}, 'sandbox: the MCP listener (egress:8080) is NOT reachable')
        or diag($p->{out});
    $p = probe($sb, $nginx_backend_ip, 8080);
    ok(!$p->{connected}, "sandbox: nor nginx's backend address $nginx_backend_ip:8080")
        or diag($p->{out});

    $p = probe($sb, $outside_ip, 9418);
    ok(!$p->{connected}, "sandbox: the outside stand-in $outside_ip:9418 is NOT reachable")
        or diag($p->{out});

    my $t = time();
    my ($rc, $out, $err) = exec_in($sb, ['getent', 'hosts', 'example.com'], timeout => 20);
    my $dt = time() - $t;
    isnt($rc, 0, sprintf('sandbox: DNS for an outside name fails (rc %d, %.1f s)', $rc, $dt))
        or diag("$out$err");
    is($out, '', '... no address');
    cmp_ok($dt, '<', 8, '... within a few seconds');

    # inhibit_ipv4: the host has no address on the sandbox bridge (the
    # IPAM gateway address, the sandboxes' default route, is held by nobody)
    my $bridge = 'br-' . substr(container_inspect_field($sandbox_net, '{{.Id}}') // '', 0, 12);
    ($rc, $out, $err) = run_cmd(['ip', '-4', '-o', 'addr', 'show', 'dev', $bridge]);
    ok($rc == 0 && $out !~ /inet /, "the host has no IPv4 address on $bridge")
        or diag("rc=$rc $out$err");
}

##############################################################################
# Redis keeps the run across a restart of its container (AOF on the volume)

{
    my ($rc, $out, $err) = compose(['restart', 'redis'], timeout => 60);
    is($rc, 0, 'docker-compose restart redis') or diag($err);
    my $res;
    ok(wait_until(20, sub {
        $res = $mcp->call_tool($sid, 'opencode_get_result', { runId => $run },
                               token => $token);
        return ($res->{structuredContent} // {})->{status};
    }, 0.5), 'opencode_get_result answers after the restart (nginx reconnected)')
        or diag(explain($res));
    is(($res->{structuredContent} // {})->{status}, 'started', '... the run survived');
}

stop_child($host_pid);
note(sprintf('test body took %.1f s', time() - $t0));
done_testing();
