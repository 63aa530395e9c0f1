#!/usr/bin/env perl
# The swarm backend (runner --backend swarm, runner/swarm.c) on a
# single-node swarm this test makes when the engine is in none (and
# leaves at the end; one it found is left as it was).  It owns the
# engine's swarm state, so t/schedule runs it alone.
#
#   0. the runner refuses --backend swarm on an engine in no swarm (exit
#      2, saying why) and a backend it does not know; then, before the
#      swarm is made, `SMCP_BACKEND=swarm make up` makes a single-node
#      swarm when the engine is in none (and says so), a task completes
#      through it, and `make down` leaves the swarm as it found it and
#      removes the egress relay
#   1. the session network isolates as the bridge one does: on an
#      internal, attachable overlay network (the runner's recipe), a
#      hardened probe container reaches the egress (a listener joined with
#      the alias `egress`) and nothing else: not a stand-in outside host
#      on an ordinary Docker network (reachable from there: the control),
#      not a listener on the host (docker0's gateway, the host's address)
#   2. docker-stack.yml as `docker stack deploy` reads it (`docker stack
#      config`, else `docker-compose config`): redis with AOF, the MCP
#      nginx replicated behind the routing mesh, egress and runner on
#      every sandbox node, no credential in any environment (Docker
#      secrets), the provider key in egress alone; every session its own
#      network: the runner keeps a relay (--egress-container,
#      --egress-relay) on the `relay` network, where the egress alone is,
#      as `egress`
#   2b. docker-stack.sentinel.yml (issue 24, point 2): `docker stack
#      config` of the two files (mcp, egress and the runner given the
#      sentinels), then its Redis part deployed on this one-node swarm (the
#      node given the labels, the stack's secrets and relay network under
#      names of this test, mcp, egress and runner at 0 tasks): the
#      sentinels see the master, its replica and each other, every member
#      by its service's address; the master's service scaled to 0: the
#      replica is promoted and keeps what was written; scaled back to 1:
#      the new task asks the sentinels and is the new master's replica;
#      a sentinel's task replaced: it monitors the master the others name
#   3. runs on the swarm backend, each path of the bridge backend's
#      runner tests once, in one stack: a run with a repository writes a
#      file; the next run of its session starts after it, sees the file
#      and continues the conversation; a runner killed (-9) mid-run is
#      replaced and re-attaches to the runs' services; cancel and a
#      deadline end a run and remove its service
#   4. sessions cannot reach each other (issue 22, point 7): two
#      sessions' sandboxes at once, a listener (a dev server) in the
#      first; the second reaches it neither by address nor by name (its
#      service's, tasks.<service>), while the first reaches it by both
#      (the control); each sandbox is on its session's internal network
#      alone and reaches the egress there as `egress`.  With the swarm
#      backend as SMCP::Stack runs it (`SMCP_BACKEND=swarm make up`'s
#      recipe), and with docker-stack.yml's runner: its flags as the
#      stack file gives them (the stack's names and secrets mapped to the
#      test's), the `relay` network as the file declares it, a stand-in
#      for the egress service on it (runner/egress-relay to the test's
#      egress listener) and the node labels its constraints want; the
#      runner makes its relay (locked down, on that network alone until a
#      session's network is joined), a task completes through it; a relay
#      found stopped is started again, one of other settings made anew
#      and joined to the networks of the runs under way
#
# Needs root, Docker, `make` and redis-server (as the runner tests).
# Traffic goes only to loopback, host addresses and containers this test
# creates; everything it makes is labelled and removed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use CPAN::Meta::YAML;
use File::Temp ();
use Test::More;
use Time::HiRes qw(time);

use SMCP::Docker qw(:all);
use SMCP::Events qw(agent_data);
use SMCP::MakeUp;
use SMCP::Stack;
use SMCP::Test qw(wait_until json_encode);

ensure_docker(root => 1);

my $T0 = time();
my $label = test_label();

# docker-stack.yml as the CLI reads it (part 2), for its runner (part 4)
my $STACK;

# the networks a service of the stack file is on (a list or a map there)
sub stack_nets {
    my ($svc) = @_;
    my $n = $svc->{networks} // [];
    return ref $n eq 'HASH' ? sort keys %$n : @$n;
}

##############################################################################
# a single-node swarm, when there is none

my $swarm_state = sub {
    my (undef, $s) = docker('info', '--format', '{{.Swarm.LocalNodeState}}');
    chomp $s;
    return $s;
};
my $state = $swarm_state->();
my (undef, $gwb) = docker('network', 'ls', '-q', '--filter', 'name=^docker_gwbridge$');
my $made = 0;

# 0. the runner refuses the swarm backend on an engine in no swarm, and
#    a backend it does not know
{
    my @cmd = ("$FindBin::Bin/../build/smcp-runner", '--egress-url', 'http://egress:8090',
               '--name', 'swarm-refusal-' . test_id());
    local $ENV{PROXY_JWT_SECRET} = SMCP::Test::rhex(32);
    my ($rc, $out, $err) = SMCP::Docker::run_cmd([@cmd, '--backend', 'bogus'], timeout => 30);
    isnt($rc, 0, '--backend bogus: refused');
    like("$out$err", qr/unknown backend \\?"bogus/, '... saying so');
    # --egress-relay: a target that is no HOST:PORT, or the relay itself
    # (it is `egress` on the session networks), or no container named
    for my $c ([['--egress-container', 'r', '--egress-relay', 'egress:8090'],
                qr/names the relay itself/],
               [['--egress-container', 'r', '--egress-relay', 'Egress.:8090'],
                qr/names the relay itself/],
               [['--egress-container', 'r', '--egress-relay', 'egress-service'],
                qr/want HOST:PORT/],
               [['--egress-container', 'r', '--egress-relay', 'a/b:8090'],
                qr/want HOST:PORT/],
               [['--egress-container', 'r', '--egress-relay', 'egress-service:65536'],
                qr/want HOST:PORT/],
               [['--egress-relay', 'egress-service:8090'],
                qr/name its container with --egress-container/]) {
        my ($args, $why) = @$c;
        ($rc, $out, $err) = SMCP::Docker::run_cmd([@cmd, @$args], timeout => 30);
        is($rc, 2, "@$args: refused (exit 2)");
        like("$out$err", $why, "... saying why") or diag("$out$err");
    }
    if ($state eq 'inactive') {
        ($rc, $out, $err) = SMCP::Docker::run_cmd([@cmd, '--backend', 'swarm'], timeout => 30);
        is($rc, 2, '--backend swarm on an engine in no swarm: exit 2');
        like("$out$err", qr/no manager of an active swarm \(state inactive\)/, '... saying why');
    }
}

# 0. SMCP_BACKEND=swarm make up, first: on an engine in no swarm it makes
#    one (and says so), make down leaves it
subtest 'SMCP_BACKEND=swarm make up' => sub {
    my $up = SMCP::MakeUp->new(backend => 'swarm', text => 'swarm stack done');
    my ($rc, $out) = $up->up;
    is($rc, 0, 'make up exits 0') or return diag($out);
    like($out, qr/^  Runner: .*backend swarm$/m, 'the runner\'s backend: swarm');
    is($swarm_state->(), 'active', '... on a swarm');
    if ($state eq 'inactive') {
        like($out, qr/made a single-node swarm/, '... which make up made, and says so');
    } else {
        unlike($out, qr/made a single-node swarm/, '... the one there was');
    }
    my ($token) = $out =~ m{Token:\s+(\S+)};
    my $sid = $up->initialize($token // '');
    ok($sid, 'the printed token initializes an MCP session');
    my $rt = $up->call($token, $sid, 'opencode_run_task', { task => 'Say hello.' });
    my $res = $up->wait_done($token, $sid, $rt->{runId} // '', 180);
    is($res->{status}, 'completed', 'a task completes through it')
        or diag(explain($res), SMCP::Test::slurp($up->state . '/logs/runner.log'));
    is($res->{result}, 'swarm stack done', '... with the model\'s answer');
    ($rc, $out) = $up->down;
    is($rc, 0, 'make down exits 0') or diag($out);
    is($swarm_state->(), $state, "make down leaves the swarm as it found it ($state)");
    my $net = $up->net;
    is(`docker ps -aq --filter name=^\Q$net\E-egress-relay\$`, '',
       'make down removed the egress relay');
    $up->stop_fakes;
};

if ($state eq 'inactive') {
    # its own address pool: clear of the 172.16/12 networks tests make
    my ($rc, $out, $err) = docker({ timeout => 60 }, 'swarm', 'init',
        '--advertise-addr', '127.0.0.1', '--default-addr-pool', '10.213.0.0/16',
        '--default-addr-pool-mask-length', '24');
    SMCP::Test::give_up("docker swarm init: $err") if $rc;
    $made = 1;
    note('a single-node swarm made for this test');
} elsif ($state ne 'active') {
    plan skip_all => "the engine's swarm is $state";
} else {
    note('the engine is in a swarm already: used, and left as it is');
}

END {
    if ($made) {
        docker({ timeout => 60 }, 'swarm', 'leave', '--force');
        # the bridge swarm mode made for its tasks' way out, unless it was there
        docker('network', 'rm', 'docker_gwbridge') unless $gwb =~ /\S/;
    }
}

##############################################################################
# 1. the overlay network isolates

subtest 'the session overlay network: the egress and nothing else' => sub {
    my $ov = 'smcp-ovl-' . test_id();
    my ($rc, undef, $err) = docker({ timeout => 60 }, 'network', 'create',
        '--driver', 'overlay', '--internal', '--attachable',
        '--label', $label, $ov);
    is($rc, 0, 'an internal, attachable overlay network (the runner\'s recipe)')
        or return diag($err);

    my @made;
    my $server = sub {
        my ($name, $reply, %o) = @_;
        my $id = run_container(name => $name, %o, cmd => ['perl', '-MIO::Socket::INET',
            '-e', 'my $l = IO::Socket::INET->new(LocalPort => 8090, Listen => 16, '
                . 'ReuseAddr => 1) or die; while (my $c = $l->accept) { '
                . "print \$c \"$reply\\n\"; close \$c }"]);
        push @made, $id;
        return $id;
    };

    # the egress: on an ordinary network, joined to the overlay as `egress`
    my $outnet = create_network();
    my $egress = $server->('smcp-egr-' . test_id(), 'EGRESS', network => $outnet->{name});
    ($rc, undef, $err) = docker('network', 'connect', '--alias', 'egress', $ov, $egress);
    is($rc, 0, 'the egress joins it with the alias egress') or diag($err);

    # the outside: a host on another network, up (the control reaches it)
    my $outside = $server->('smcp-out-' . test_id(), 'OUTSIDE', network => $outnet->{name});
    my $out_ip = container_ip($outside, $outnet->{name});
    my $control = run_container(network => $outnet->{name}, cmd => ['sleep', '300']);
    push @made, $control;
    my $p = probe_tcp($control, $out_ip, 8090);
    ok($p->{connected} && $p->{reply} =~ /OUTSIDE/, "control: the outside host $out_ip answers")
        or diag($p->{out});

    # a listener on the host, on every address
    my ($hpid, $hport) = tcp_listener(addr => '0.0.0.0', port => 0, reply => "HOST\n");

    my $probe = run_container(network => $ov, sandbox => 1, cmd => ['sleep', '300']);
    push @made, $probe;

    $p = probe_tcp($probe, 'egress', 8090);
    ok($p->{connected} && $p->{reply} =~ /EGRESS/, 'the probe reaches the egress')
        or diag($p->{out});

    $p = probe_tcp($probe, $out_ip, 8090);
    ok(!($p->{reply} =~ /OUTSIDE/), "the probe does not reach the outside host $out_ip")
        or diag($p->{out});

    my %docker0 = network_gateway('bridge');
    for my $ip (grep { defined } $docker0{gateway}, host_ip()) {
        $p = probe_tcp($probe, $ip, $hport);
        ok(!($p->{reply} =~ /HOST/), "the probe does not reach the host at $ip:$hport")
            or diag($p->{out});
    }

    stop_child($hpid);
    remove_container($_) for @made;
    docker('network', 'rm', $ov);
    remove_network($outnet->{name});
};

##############################################################################
# 2. docker-stack.yml, as `docker stack deploy` reads it

subtest 'docker-stack.yml' => sub {
    my $file = "$FindBin::Bin/../docker-stack.yml";
    my ($rc, $out, $err) = docker('stack', 'config', '-c', $file);
    ($rc, $out, $err) = SMCP::Docker::run_cmd(['docker-compose', '-f', $file, 'config'],
                                              timeout => 60)
        if $rc != 0 && $err =~ /unknown|not a docker command|Usage/i;
    is($rc, 0, 'the stack file is valid') or return diag($err);
    my $y = CPAN::Meta::YAML->read_string($out) or return fail('YAML: ' . CPAN::Meta::YAML->errstr);
    my $d = $STACK = $y->[0];
    my $svc = $d->{services};
    is_deeply([sort keys %$svc], [qw(egress mcp redis runner)], 'redis, mcp, egress, runner');
    is_deeply([map { $svc->{$_}{environment}{SMCP_REDIS} } qw(mcp egress runner)],
              [('redis:6379') x 3], 'mcp, egress, runner: SMCP_REDIS=redis:6379');
    like(join(' ', @{ $svc->{redis}{command} }), qr/--appendonly yes/, 'redis: AOF');
    ok(($svc->{mcp}{deploy}{replicas} // 0) >= 2, 'mcp: replicas')
        and is($svc->{mcp}{ports}[0]{mode}, 'ingress', '... behind the routing mesh');
    is($svc->{$_}{deploy}{mode}, 'global', "$_: one per sandbox node") for qw(egress runner);
    like(join(' ', @{ $svc->{runner}{command} }), qr/--backend=swarm/, 'runner: --backend=swarm');
    # a network per session: the runner keeps a relay on its node, which
    # joins each one as egress and reaches the egress service on a
    # network of their own (issue 22, 7)
    my %flag = map { /^--([\w-]+)=(.*)$/ ? ($1 => $2) : () } @{ $svc->{runner}{command} };
    is($flag{'egress-container'}, 'smcp-egress-relay',
       'runner: --egress-container=smcp-egress-relay (a network per session, it joins each)');
    my ($to) = ($flag{'egress-relay'} // '') =~ /^([\w.-]+):8090$/;
    ok($to && $to ne 'egress', '... the relay it keeps (--egress-relay), to the egress '
       . "service's port 8090 as $to (the relay itself is egress)");
    is($flag{'egress-url'}, 'http://egress:8090', '... which sandboxes reach as egress');
    my ($relay) = grep { ($d->{networks}{$_}{name} // '') eq ($flag{network} // '-') }
                  sort keys %{ $d->{networks} };
    ok($relay, "... on --network=" . ($flag{network} // '') . ', a network of the file')
        or return;
    is(join(' ', map { $d->{networks}{$relay}{$_} // '-' } qw(driver internal attachable)),
       'overlay true true', "$relay: an internal, attachable overlay");
    is_deeply([grep { grep { $_ eq $relay } stack_nets($svc->{$_}) } sort keys %$svc],
              ['egress'], "... the egress service alone on it");
    is_deeply($svc->{egress}{networks}{$relay}{aliases}, [$to // '-'], "... as $to");
    is_deeply([grep { ($d->{networks}{$_}{internal} // '') eq 'true' } sort keys %{ $d->{networks} }],
              [$relay], 'no other internal network (none that all sessions share)');
    # no credential in any service's environment: Docker secrets only
    my @env = map { keys %{ $svc->{$_}{environment} || {} } } sort keys %$svc;
    is_deeply([grep { /KEY|TOKEN|PASSWORD$|^PROXY_JWT_SECRET$/ } @env], [],
              'no credential in an environment (' . scalar(@env) . ' variables)');
    is_deeply([sort grep { $d->{secrets}{$_}{external} eq 'true' } keys %{ $d->{secrets} }],
              [qw(smcp_anthropic_api_key smcp_github_token smcp_jwt_secret smcp_redis_password)],
              'secrets: Docker secrets, made beforehand');
    my $secrets = sub { map { ref $_ ? $_->{source} : $_ } @{ $svc->{ $_[0] }{secrets} || [] } };
    ok((grep { $_ eq 'smcp_anthropic_api_key' } $secrets->('egress'))
       && !(grep { $_ eq 'smcp_anthropic_api_key' } map { $secrets->($_) } qw(mcp runner redis)),
       'the provider key goes to egress alone');
};

##############################################################################
# 2b. docker-stack.sentinel.yml, read, and its Redis part deployed

subtest 'docker-stack.sentinel.yml' => sub {
    my $top = "$FindBin::Bin/..";
    my @files = map { ('-c', "$top/$_") } qw(docker-stack.yml docker-stack.sentinel.yml);
    my ($rc, $out, $err) = docker('stack', 'config', @files);
    return pass("no `docker stack config` in this CLI: $err")
        if $rc != 0 && $err =~ /unknown|not a docker command|Usage/i;
    is($rc, 0, 'the two files are valid together') or return diag($err);
    my $d = (CPAN::Meta::YAML->read_string($out) || [])->[0] || {};
    my $svc = $d->{services} || {};
    is_deeply([sort keys %$svc], [qw(egress mcp redis redis-replica runner sentinel-1
                                     sentinel-2 sentinel-3)],
              'redis, its replica, three sentinels beside mcp, egress, runner');
    my $addr = 'sentinel://sentinel-1:26379,sentinel-2:26379,sentinel-3:26379/smcp';
    is_deeply([map { $svc->{$_}{environment}{SMCP_REDIS} } qw(mcp egress runner)],
              [($addr) x 3], "mcp, egress, runner: SMCP_REDIS=$addr");
    my %on = map { ($_ => join(' ', @{ $svc->{$_}{deploy}{placement}{constraints} || [] })) }
             qw(sentinel-1 sentinel-2 sentinel-3);
    is(scalar(keys %{ { reverse %on } }), 3, "each sentinel on a node of its own ($on{'sentinel-1'}, ...)");
    my @env = map { keys %{ $svc->{$_}{environment} || {} } } sort keys %$svc;
    is_deeply([grep { /KEY|TOKEN|PASSWORD$|^PROXY_JWT_SECRET$|AUTH/ } @env], [],
              'no credential in an environment');

    # the Redis part on this swarm, under this test's names
    my $id = test_id() =~ s/[^a-z0-9]//gr;
    my $stack = "smcpt$id";
    my $image = "smcp-redis:swarm-$id";
    ($rc, $out, $err) = SMCP::Docker::run_cmd(['docker', 'build', '-q', '-f',
        "$top/runner/redis.Dockerfile", '--build-arg', 'BASE=' . base_image(),
        '-t', $image, $top], timeout => 900);
    is($rc, 0, "the Redis image ($image)") or return diag($err);
    my (undef, $node) = docker('info', '--format', '{{.Swarm.NodeID}}');
    chomp $node;
    my @labels = grep {
        my (undef, $has) = docker('node', 'inspect', '--format', "{{index .Spec.Labels \"$_\"}}", $node);
        $has !~ /\S/ && (docker('node', 'update', '--label-add', "$_=1", $node))[0] == 0;
    } qw(smcp-redis smcp-redis-replica smcp-sentinel-1 smcp-sentinel-2 smcp-sentinel-3);
    my $password = SMCP::Test::rhex(16);
    my @secrets = map { "${stack}_$_" } qw(jwt_secret redis_password anthropic_api_key github_token);
    docker({ stdin => $_ eq "${stack}_redis_password" ? $password : SMCP::Test::rhex(8) },
           'secret', 'create', $_, '-') for @secrets;
    my $overlay = File::Temp::tempdir(CLEANUP => 1) . "/stack-test-$id.yml";
    SMCP::Test::spew($overlay, join('', "version: \"3.8\"\nservices:\n",
        map({ "  $_:\n    deploy:\n      mode: replicated\n      replicas: 0\n" }
            qw(egress runner)),
        "networks:\n  relay:\n    name: ${stack}_relay\n",
        "secrets:\n", map({ my ($n) = /^${stack}_(.*)$/;
                            "  smcp_$n:\n    external: true\n    name: $_\n" } @secrets)));
    my $cleanup = sub {
        docker({ timeout => 120 }, 'stack', 'rm', $stack);
        wait_until(90, sub {
            my (undef, $c) = docker('ps', '-aq', '--filter', "label=com.docker.stack.namespace=$stack");
            $c !~ /\S/;
        }, 1);
        for my $v (grep { /^\Q$stack\E_/ } split ' ', (docker('volume', 'ls', '-q'))[1]) {
            wait_until(30, sub { (docker('volume', 'rm', $v))[0] == 0 }, 1);
        }
        wait_until(30, sub { docker('network', 'rm', "${stack}_backend", "${stack}_relay");
                             (docker('network', 'ls', '-q', '--filter', "name=$stack"))[1] !~ /\S/ }, 1);
        docker('secret', 'rm', @secrets);
        docker('node', 'update', '--label-rm', $_, $node) for @labels;
        docker('image', 'rm', $image);
    };
    local $ENV{SMCP_REDIS_IMAGE} = $image;
    local $ENV{SMCP_SENTINEL_DOWN_MS} = 2000;
    local $ENV{SMCP_MCP_REPLICAS} = 0;
    local $ENV{SMCP_PORT} = SMCP::Test::free_port();
    ($rc, $out, $err) = docker({ timeout => 180 }, 'stack', 'deploy', @files, '-c', $overlay,
                               $stack);
    if (!is($rc, 0, "deployed as $stack")) {
        diag($err);
        return $cleanup->();
    }

    my $ctr = sub {
        my (undef, $c) = docker('ps', '-q', '--filter', "label=com.docker.swarm.service.name=${stack}_$_[0]",
                                '--filter', 'status=running');
        return (split ' ', $c)[0] // '';
    };
    my $cli = sub {
        my ($svc, @cmd) = @_;
        my $c = $ctr->($svc) or return '';
        my $sentinel = $svc =~ /^sentinel/;
        my (undef, $o) = docker({ timeout => 20 }, 'exec', $c, 'sh', '-c',
            ($sentinel ? 'REDISCLI_AUTH= ' : 'REDISCLI_AUTH=$(cat /run/secrets/smcp_redis_password) ')
            . 'exec redis-cli --no-auth-warning --raw -p ' . ($sentinel ? 26379 : 6379)
            . ' "$@"', 'cli', @cmd);
        return $o // '';
    };
    # a service's task's address on the stack's backend network
    my $ip = sub {
        my $c = $ctr->($_[0]) or return '';
        return container_ip($c, "${stack}_backend") // '';
    };
    my $named = sub {
        my @l = split /\n/, $cli->("sentinel-$_[0]", 'SENTINEL', 'get-master-addr-by-name', 'smcp');
        return $l[0] // '';
    };
    my ($m_ip, $r_ip);
    my $last = '';
    ok(wait_until(180, sub {
        ($m_ip, $r_ip) = ($ip->('redis'), $ip->('redis-replica'));
        for my $n (1 .. 3) {
            $last = $cli->("sentinel-$n", 'SENTINEL', 'MASTER', 'smcp');
            my %f = $last =~ /^(ip|num-slaves|num-other-sentinels)\n(.*)$/mg;
            return 0 unless ($f{ip} // '') eq $m_ip && ($f{'num-slaves'} // 0) >= 1
                         && ($f{'num-other-sentinels'} // 0) >= 2;
        }
        my $r = $cli->('sentinel-1', 'SENTINEL', 'REPLICAS', 'smcp');
        return $r =~ /^\Q$r_ip\E$/m;
    }, 1), "the sentinels see the master (redis, $m_ip), its replica ($r_ip) "
         . 'and each other, by their tasks\' addresses')
        or do { diag($last); return $cleanup->() };
    like($cli->('redis', 'SET', 'smcp:stack-test', 'kept'), qr/^OK$/m, 'a key written');

    ($rc, undef, $err) = docker({ timeout => 120 }, 'service', 'scale', '--detach',
                                "${stack}_redis=0");
    my $t0 = time();
    ok(wait_until(90, sub { $named->(1) eq $r_ip && $named->(2) eq $r_ip }, 0.5),
       'redis scaled to 0: the sentinels name the replica the master')
        or diag($cli->('sentinel-1', 'SENTINEL', 'MASTER', 'smcp'));
    note(sprintf('promoted %.1f s after the scale', time() - $t0));
    like($cli->('redis-replica', 'ROLE'), qr/^master$/m, '... whose ROLE is master');
    like($cli->('redis-replica', 'GET', 'smcp:stack-test'), qr/^kept$/m, '... with the key');

    docker({ timeout => 120 }, 'service', 'scale', '--detach', "${stack}_redis=1");
    my $role = '';
    ok(wait_until(120, sub { $role = $cli->('redis', 'ROLE');
                             $role =~ /^slave\n\Q$r_ip\E\n6379\n/ }, 1),
       "scaled back to 1: redis is the replica of the new master ($r_ip)") or diag($role);
    # (the task's stderr: the CLI's)
    my (undef, $lo, $le) = docker('service', 'logs', '--raw', "${stack}_redis");
    like("$lo$le", qr/the sentinels name \Q$r_ip\E:6379 the master: its replica/,
         '... having asked the sentinels');

    docker({ timeout => 120 }, 'service', 'update', '--force', '--detach', "${stack}_sentinel-3");
    ok(wait_until(120, sub {
        my (undef, $lo, $le) = docker('service', 'logs', '--raw', "${stack}_sentinel-3");
        "$lo$le" =~ /names \Q$r_ip\E:6379 the master/ && $named->(3) eq $r_ip;
    }, 1), 'sentinel 3\'s task replaced: it monitors the master the others name')
        or diag($cli->('sentinel-3', 'SENTINEL', 'MASTER', 'smcp'));
    # the addresses gone with the tasks forgotten (SENTINEL RESET), the
    # live ones learnt again: a failover still has its majority
    ok(wait_until(60, sub {
        for my $n (1 .. 3) {
            $last = $cli->("sentinel-$n", 'SENTINEL', 'MASTER', 'smcp');
            my %f = $last =~ /^(num-slaves|num-other-sentinels)\n(.*)$/mg;
            return 0 unless ($f{'num-slaves'} // '') eq '1'
                         && ($f{'num-other-sentinels'} // '') eq '2';
        }
        1;
    }, 1), '... and every sentinel knows one replica and two other sentinels, '
           . 'none of the addresses gone with their tasks') or diag($last);
    $cleanup->();
};

##############################################################################
# 3. runs on the swarm backend

my $NOTE = "NOTE-swarm-5e1d\n";
my $LINES = 200;
my $PRINT = qq{for i in \$(seq $LINES); do echo "line-\$i"; done > /proc/1/fd/1; echo printed};

$ENV{SMCP_TEST_BACKEND} = 'swarm';
my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-WRITE' => [
            { tool_use => { name => 'write', input => {
                filePath => '/workspace/repo/notes.txt', content => $NOTE } } },
            { text => 'Wrote the note.', hang => 3 },
        ],
        'SCENARIO-READ' => [
            { tool_use => { name => 'bash', input => {
                command => 'cat notes.txt', description => 'Read the note' } } },
            { text => 'Read the note.' },
        ],
        'SCENARIO-LONG' => [
            { tool_use => { name => 'bash', input => { command => $PRINT,
                                                       description => 'Print' } } },
            { text => 'Long done.', hang => 12 },
        ],
        'SCENARIO-HANG' => [ { hang => 150 } ],
        'SCENARIO-HELLO' => [ { text => 'Hello through the relay.' } ],
        'SCENARIO-CANCEL' => [
            { tool_use => { name => 'write', input => {
                filePath => '/workspace/repo/partial.txt', content => "partial\n" } } },
            { hang => 150 },
        ],
    },
    repos => { 'owner/repo' => { 'README.md' => "# Demo\n" } },
);
my $runner = $s->start_runner(concurrency => 3);

sub lines_stored {
    my ($id) = @_;
    return grep { ($_->{type} // '') eq 'log' && ($_->{data} // '') =~ /^line-\d+$/ }
        $s->stored_events($id);
}

subtest 'a session\'s runs in order; a runner killed mid-run re-attaches' => sub {
    my $w = $s->run_task(task => 'SCENARIO-WRITE: leave a note',
                         repository => 'https://github.com/owner/repo', title => 'write');
    my $rd = $s->run_task(task => 'SCENARIO-READ: read the note', sessionId => $w->{sessionId});
    my $long = $s->run_task(task => 'SCENARIO-LONG: print, then answer late', title => 'long');

    ok(wait_until(180, sub { lines_stored($long->{runId}) >= $LINES }, 0.3),
       "the long run's $LINES lines are stored") or diag($s->runner_log_tail($runner));
    $s->stop_runner($runner, 'KILL');
    $runner = $s->start_runner(concurrency => 3);

    my %r = map { ($_->[0] => $s->wait_done($_->[1]{runId}, 180)) }
            (['w', $w], ['rd', $rd], ['long', $long]);
    for (qw(w rd long)) {
        is($r{$_}{status}, 'completed', "$_: completed") or $s->diag_run($r{$_}{runId}, $runner);
    }
    is($r{w}{result}, 'Wrote the note.', 'write: its answer');
    is_deeply([sort map { $_->{path} } @{ $r{w}{filesChanged} || [] }], ['notes.txt'],
              'write: filesChanged, from the cloned repository');
    my %h = map { ($_ => $s->run_hash($r{$_}{runId})) } qw(w rd);
    ok($h{rd}{started_at} && $h{w}{finished_at} && $h{rd}{started_at} >= $h{w}{finished_at},
       'read started after write finished');
    my ($cat) = grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($r{rd}{runId}));
    is($cat && $cat->{part}{state}{output}, $NOTE, 'read: `cat notes.txt` shows the note')
        or diag(json_encode($cat && $cat->{part}{state}));
    my %oc = map {
        my ($x) = grep { $_->{sessionID} } agent_data($s->events($r{$_}{runId}));
        ($_ => $x && $x->{sessionID})
    } qw(w rd);
    ok($oc{w} && $oc{w} eq ($oc{rd} // ''), "read continued write's OpenCode session");
    is($r{long}{result}, 'Long done.', 'long: its answer, after the runner was replaced');
    like($s->runner_log($runner), qr/run=\Q$long->{runId}\E.*re-attached/,
         'the new runner re-attached to the long run');
    my %seen;
    my @lines = map { $_->{data} } lines_stored($long->{runId});
    is(scalar(@lines), $LINES, "long: its $LINES lines");
    is(scalar(grep { $seen{$_}++ } @lines), 0, '... each stored once');
};

subtest 'cancel and deadline' => sub {
    my $hang = $s->run_task(task => 'SCENARIO-HANG: the model never answers', title => 'hang',
                            timeoutSeconds => 40);
    my $cancel = $s->run_task(task => 'SCENARIO-CANCEL: write, then wait', title => 'cancel');
    my $id = $cancel->{runId};
    ok(wait_until(150, sub {
        scalar grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($id)) }, 0.3),
       'cancel: the write is stored (the run is mid-way)') or $s->diag_run($id, $runner);
    $s->call('opencode_cancel_run', { runId => $id });
    my $r = $s->wait_done($id, 60);
    is($r->{status}, 'cancelled', 'cancel: cancelled') or $s->diag_run($id, $runner);
    ok(wait_until(30, sub { !$s->run_containers($id) }), '... and its service is gone');

    $r = $s->wait_done($hang->{runId}, 150);
    is($r->{status}, 'failed', 'deadline: failed') or $s->diag_run($hang->{runId}, $runner);
    like($r->{error} // '', qr/deadline/, '... at its deadline: ' . ($r->{error} // 'null'));
    ok(wait_until(30, sub { !$s->run_containers($hang->{runId}) }),
       '... and its service is gone');
};

##############################################################################
# 4. sessions cannot reach each other

# the running task container of a run's service, and the service's name
sub sandbox_of {
    my ($run) = @_;
    my (undef, $cid) = docker('ps', '-q', '--filter', "label=smcp.run=$run",
                              '--filter', 'status=running');
    my (undef, $svc) = docker('service', 'ls', '--filter', "label=smcp.run=$run",
                              '--format', '{{.Name}}');
    ($cid) = split ' ', $cid;
    ($svc) = split ' ', $svc;
    return ($cid, $svc);
}

# two sessions' sandboxes at once (their runs wait on the model), a
# listener in the first: the second reaches it by no address and no
# name, the first by both; each is on its session's network alone and
# reaches the egress there (EGRESS_PORT) as `egress`
sub sessions_isolated {
    my ($s, $runner, $eport) = @_;
    my @runs = map {
        $s->run_task(task => "SCENARIO-HANG: session $_ waits", title => "isolated $_",
                     timeoutSeconds => 300)
    } qw(A B);
    my (@cid, @svc);
    for my $i (0, 1) {
        my $id = $runs[$i]{runId};
        ok(wait_until(180, sub { ($cid[$i], $svc[$i]) = sandbox_of($id); $cid[$i] && $svc[$i] }, 0.5),
           "session $i: its sandbox runs (service " . ($svc[$i] // '?') . ')')
            or return $s->diag_run($id, $runner);
        my $ses = $runs[$i]{sessionId};
        my (undef, $nets) = docker('inspect', '--format',
            '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}', $cid[$i]);
        is_deeply([split ' ', $nets], ["smcp-net-$ses"], "... on its session's network alone");
        my (undef, $internal) = docker('network', 'inspect', '--format', '{{.Internal}}',
                                       "smcp-net-$ses");
        is($internal, "true\n", '... which is internal');
        # the egress nginx answers (a request without a run token)
        my ($rc, $code, $err) = exec_in($cid[$i], ['curl', '-sS', '-o', '/dev/null', '-w',
            '%{http_code}', '--max-time', '10', "http://egress:$eport/"], timeout => 20);
        like($code, qr/^[1-5]\d\d$/, "... it reaches the egress as egress:$eport (HTTP $code)")
            or diag("rc=$rc $err");
    }
    my ($a, $b) = @cid;
    my $ip = container_ip($a);

    # a dev server in A, on every address, as the agent would start one
    my ($rc, undef, $err) = docker('exec', '-d', '-u', '1000:1000', $a, 'perl',
        '-MIO::Socket::INET', '-e', 'my $l = IO::Socket::INET->new(LocalPort => 7777, '
        . 'Listen => 16, ReuseAddr => 1) or die $!; '
        . 'while (my $c = $l->accept) { print $c "DEVSERVER\n"; close $c }');
    is($rc, 0, 'a listener on port 7777 in session A\'s sandbox') or diag($err);
    ok(wait_until(30, sub { probe_tcp($a, '127.0.0.1', 7777)->{reply} =~ /DEVSERVER/ }, 0.5),
       '... listening');

    # the control: from A's own network, by address and by name
    my $p = probe_tcp($a, $ip, 7777);
    like($p->{reply}, qr/DEVSERVER/, "control: A reaches it at its address $ip") or diag($p->{out});
    my (undef, $hosts) = exec_in($a, ['getent', 'hosts', $svc[0]], timeout => 15);
    like($hosts, qr/^\d+\.\d+\.\d+\.\d+\s/, "control: A resolves its service name $svc[0]");
    $p = probe_tcp($a, "tasks.$svc[0]", 7777);
    like($p->{reply}, qr/DEVSERVER/, "control: ... and reaches it as tasks.$svc[0]")
        or diag($p->{out});

    # B: by the address, by the names
    $p = probe_tcp($b, $ip, 7777);
    ok(!$p->{connected} && $p->{reply} !~ /DEVSERVER/,
       "session B's sandbox does not reach A's listener at $ip:7777") or diag($p->{out});
    for my $name ($svc[0], "tasks.$svc[0]") {
        my ($rc, $out) = exec_in($b, ['getent', 'hosts', $name], timeout => 15);
        ok($rc != 0 && $out eq '', "... nor resolves $name") or diag("rc=$rc $out");
        $p = probe_tcp($b, $name, 7777);
        ok(!$p->{connected} && $p->{reply} !~ /DEVSERVER/, "... nor reaches $name:7777")
            or diag($p->{out});
    }

    for my $run (@runs) {
        $s->call('opencode_cancel_run', { runId => $run->{runId} });
        is($s->wait_done($run->{runId}, 90)->{status}, 'cancelled', 'the run is cancelled');
    }
}

subtest 'sessions isolated: the swarm backend (SMCP_BACKEND=swarm make up)' => sub {
    sessions_isolated($s, $runner, $s->egress_port);
};

ok($s->runner_alive($runner), 'the runner is up');
$s->stop_runner($runner, 'TERM');

# docker-stack.yml's runner, with the flags the file gives it: the stack's
# names and secrets mapped to this test's
subtest "sessions isolated: docker-stack.yml's runner" => sub {
    $STACK or return fail('no stack configuration (part 2)');
    my $cmd = $STACK->{services}{runner}{command};
    my %flag = map { /^--([\w-]+)=(.*)$/ ? ($1 => $2) : () } @$cmd;
    my ($netkey) = grep { ($STACK->{networks}{$_}{name} // '') eq ($flag{network} // '-') }
                   sort keys %{ $STACK->{networks} };
    ok($netkey, "the runner's --network is the file's $netkey network")
        or return diag(join(' ', @$cmd));
    # the egress service's port: the relay's target, else the sandboxes'
    my ($to_port) = ($flag{'egress-relay'} // $flag{'egress-url'} // '') =~ /:(\d+)\/?$/;
    my $id = test_id();
    my $relay_net = "smcp-relay-$id";
    my $backend_net = "smcp-backend-$id";
    my $relay = "smcp-egress-relay-$id";
    my $egress = "smcp-egress-$id";
    my %map = (
        redis                 => '127.0.0.1:' . $s->t->redis_port,
        # the test's Redis has no password
        'redis-password-file' => undef,
        'secret-file'         => $s->t->secret_file,
        image                 => $s->image,
        network               => $relay_net,
        'egress-container'    => $relay,
    );
    my @argv = map {
        my ($k) = /^--([\w-]+)=/;
        !exists $map{$k} ? $_ : defined $map{$k} ? "--$k=$map{$k}" : ();
    } @$cmd;
    # SMCP_REDIS of the service's environment, the test's Redis
    push @argv, "--redis=$map{redis}" unless grep { /^--redis=/ } @argv;
    note("docker-stack.yml's runner: @argv");

    # the node labels its constraints want
    my (undef, $node) = docker('info', '--format', '{{.Swarm.NodeID}}');
    chomp $node;
    my @labels;
    for (split /;/, $flag{'swarm-constraints'} // '') {
        my ($k, $v) = /^node\.labels\.([\w.-]+)\s*==\s*(\S+)$/ or next;
        my (undef, $has) = docker('node', 'inspect', '--format', "{{index .Spec.Labels \"$k\"}}", $node);
        chomp $has;
        next if $has eq $v;
        docker('node', 'update', '--label-add', "$k=$v", $node);
        push @labels, $k;
    }

    # the relay, then the stand-in (its task goes after its service), then
    # the networks
    my $cleanup = sub {
        docker({ timeout => 60 }, 'rm', '-f', $relay);
        docker({ timeout => 60 }, 'service', 'rm', $egress);
        wait_until(60, sub { (docker('ps', '-aq', '--filter',
                                     "label=com.docker.swarm.service.name=$egress"))[1] !~ /\S/ });
        for my $n ($relay_net, $backend_net) {
            wait_until(30, sub { my ($rc, undef, $e) = docker('network', 'rm', $n);
                                 $rc == 0 || $e =~ /not found/ });
        }
        docker('node', 'update', '--label-rm', $_, $node) for @labels;
    };

    my $ok = eval {
        # the relay network as the file declares it, the backend beside it
        my $n = $STACK->{networks}{$netkey};
        my ($rc, undef, $err) = docker({ timeout => 60 }, 'network', 'create',
            '--driver', $n->{driver} // 'overlay',
            (($n->{internal} // '') eq 'true' ? '--internal' : ()),
            (($n->{attachable} // '') eq 'true' ? '--attachable' : ()),
            '--label', $label, $relay_net);
        is($rc, 0, "the stack's $netkey network: $relay_net") or die $err;
        ($rc, undef, $err) = docker({ timeout => 60 }, 'network', 'create', '--driver', 'overlay',
                                    '--label', $label, $backend_net);
        is($rc, 0, "... and a backend: $backend_net") or die $err;

        # the egress service, a stand-in on those networks as the file
        # puts it there: runner/egress-relay to this test's egress listener
        my $aliases = $STACK->{services}{egress}{networks}{$netkey}{aliases} || [];
        ($rc, undef, $err) = docker({ timeout => 120 }, 'service', 'create', '--detach',
            '--name', $egress, '--label', $label, '--constraint', "node.id==$node",
            '--endpoint-mode', $STACK->{services}{egress}{deploy}{endpoint_mode} // 'vip',
            '--network', $backend_net,
            '--network', join(',', "name=$relay_net", map { "alias=$_" } @$aliases),
            '--mount', 'type=bind,src=' . SMCP::Test::repo_root()
                       . '/runner/egress-relay,dst=/egress-relay,readonly',
            '--user', '65534', '--read-only', '--init', '--entrypoint', 'perl',
            SMCP::Docker::base_image(), '/egress-relay', $to_port,
            $s->gateway . ':' . $s->egress_port);
        is($rc, 0, "a stand-in for the egress service on it as @$aliases") or die $err;

        my $r = $s->start_runner(name => 'rt-stack-' . test_id(), argv => \@argv);
        ok(wait_until(60, sub { $s->runner_log($r) =~ /egress relay \Q$relay\E made/ }, 0.5),
           'the runner makes its relay') or diag($s->runner_log_tail($r));
        my (undef, $how) = docker('inspect', '--format',
            '{{.State.Running}} {{.Config.User}} {{.HostConfig.ReadonlyRootfs}} '
            . '{{json .HostConfig.CapDrop}} {{json .HostConfig.SecurityOpt}} '
            . '{{.HostConfig.RestartPolicy.Name}} '
            . '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}', $relay);
        is($how, qq(true 65534:65534 true ["ALL"] ["no-new-privileges"] unless-stopped $relay_net \n),
           '... running, locked down, on that network alone');

        my $hello = $s->run_task(task => 'SCENARIO-HELLO: say hello', title => 'hello');
        my $res = $s->wait_done($hello->{runId}, 180);
        is($res->{status}, 'completed', 'a task completes through the relay')
            or $s->diag_run($hello->{runId}, $r);
        is($res->{result}, 'Hello through the relay.', '... with the model\'s answer');
        ok(wait_until(60, sub { (docker('network', 'inspect', "smcp-net-$hello->{sessionId}"))[0] != 0 }, 0.5),
           '... its session\'s network removed after it');

        # a relay found stopped is started again before the next join
        docker('stop', '-t', '1', $relay);
        my $again = $s->run_task(task => 'SCENARIO-HELLO: again', title => 'hello again');
        is($s->wait_done($again->{runId}, 180)->{status}, 'completed',
           'a relay found stopped is started again: a task completes')
            or $s->diag_run($again->{runId}, $r);

        # other settings: the relay is made anew, on the networks of the
        # runs under way
        my $live = $s->run_task(task => 'SCENARIO-HANG: under way while the relay changes',
                                title => 'live', timeoutSeconds => 300);
        my $cid;
        ok(wait_until(180, sub { ($cid) = sandbox_of($live->{runId}); $cid }, 0.5),
           'a run under way') or $s->diag_run($live->{runId}, $r);
        my $old = container_inspect_field($relay, '{{.Id}}');
        $s->stop_runner($r, 'TERM');
        $r = $s->start_runner(name => $r->{name}, argv => [@argv, '--concurrency=3']);
        ok(wait_until(60, sub { $s->runner_log($r) =~ /egress relay \Q$relay\E: made with other settings/ }, 0.5),
           'a runner with other settings (--concurrency) makes its relay anew')
            or diag($s->runner_log_tail($r));
        # (the log line comes before the old one's removal: waited for)
        my $lnet = "smcp-net-$live->{sessionId}";
        my ($now, $nets) = ('', '');
        ok(wait_until(60, sub {
            $now = container_inspect_field($relay, '{{.Id}}') // '';
            $nets = container_inspect_field($relay,
                '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}') // '';
            return $now && $now ne $old && $nets =~ /(^| )\Q$lnet\E /;
        }, 0.5), "... a new container, on the network of the run under way, $lnet")
            or diag("relay $now on: $nets");
        my ($rc2, $code) = exec_in($cid, ['curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}',
                                          '--max-time', '10', "http://egress:$to_port/"], timeout => 20);
        like($code, qr/^[1-5]\d\d$/, "... where the run reaches the egress again (HTTP $code)");
        $s->call('opencode_cancel_run', { runId => $live->{runId} });
        is($s->wait_done($live->{runId}, 90)->{status}, 'cancelled', 'the run is cancelled');

        sessions_isolated($s, $r, $to_port);
        ok($s->runner_alive($r), 'the runner is up');
        $s->stop_runner($r, 'TERM');
        1;
    };
    my $e = $@;
    $cleanup->();
    fail("docker-stack.yml's runner: $e") unless $ok;
};

my (undef, $left) = docker('service', 'ls', '-q', '--filter', 'label=smcp.runner');
note("services left by others: $left") if $left =~ /\S/;

note(sprintf('total %.1f s', time() - $T0));
$s->done;
