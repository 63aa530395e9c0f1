#!/usr/bin/env perl
# The swarm backend (runner --backend swarm, runner/swarm.c) on a
# single-node swarm this test makes when the engine is in none (and
# leaves at the end; one it found is left as it was):
#
#   0. the runner refuses --backend swarm on an engine in no swarm (exit
#      2, saying why) and a backend it does not know; then
#      t/stack.t with SMCP_TEST_BACKEND=swarm, before the swarm is made:
#      `SMCP_BACKEND=swarm make up` makes a single-node swarm when the
#      engine is in none (and says so), a task completes through it, and
#      `make down` leaves the swarm as it found it
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
#      secrets), the provider key in egress alone
#   3. the runner tests against the swarm backend: t/runner.t (a run end
#      to end, two sessions at once, a session's runs in order),
#      t/runner_failures.t (cancel, deadline), t/runner_reattach.t (a
#      runner restarted mid-run re-attaches to its service), each run with
#      SMCP_TEST_BACKEND=swarm (t/lib/SMCP/Stack.pm)
#
# Needs root, Docker, `make` and redis-server (as the runner tests).
# Traffic goes only to loopback, host addresses and containers this test
# creates; everything it makes is labelled and removed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use CPAN::Meta::YAML;
use Test::More;
use Time::HiRes qw(time);

use SMCP::Docker qw(:all);
use SMCP::Test qw(wait_until);

ensure_docker(root => 1);

my $T0 = time();
my $label = test_label();

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

# a test file run with SMCP_TEST_BACKEND=swarm: whether it passed
sub swarm_run {
    my ($file) = @_;
    my $t1 = time();
    local $ENV{SMCP_TEST_BACKEND} = 'swarm';
    my $out = `$^X $FindBin::Bin/$file 2>&1`;
    my $rc = $? >> 8;
    ok($rc == 0 && $out !~ /^not ok/m,
       sprintf('%s passes with SMCP_TEST_BACKEND=swarm (%.0f s)', $file, time() - $t1))
        or diag($out);
    note($out) if $ENV{SMCP_TEST_VERBOSE};
    return $out;
}

# 0. the runner refuses the swarm backend on an engine in no swarm, and
#    a backend it does not know
{
    my @cmd = ("$FindBin::Bin/../build/smcp-runner", '--egress-url', 'http://egress:8090',
               '--name', 'swarm-refusal-' . test_id());
    local $ENV{PROXY_JWT_SECRET} = SMCP::Test::rhex(32);
    my ($rc, $out, $err) = SMCP::Docker::run_cmd([@cmd, '--backend', 'bogus'], timeout => 30);
    isnt($rc, 0, '--backend bogus: refused');
    like("$out$err", qr/unknown backend \\?"bogus/, '... saying so');
    if ($state eq 'inactive') {
        ($rc, $out, $err) = SMCP::Docker::run_cmd([@cmd, '--backend', 'swarm'], timeout => 30);
        is($rc, 2, '--backend swarm on an engine in no swarm: exit 2');
        like("$out$err", qr/no manager of an active swarm \(state inactive\)/, '... saying why');
    }
}

# 0. SMCP_BACKEND=swarm make up, first: on an engine in no swarm it makes
#    one (and says so), make down leaves it (t/stack.t checks both)
my $out = swarm_run('stack.t');
if ($state eq 'inactive') {
    like($out, qr/ok \d+ - \.\.\. which make up made, and says so/, 'make up made a swarm');
    is($swarm_state->(), 'inactive', 'make down left it: the engine is in none again');
}

if ($state eq 'inactive') {
    # its own address pool: clear of the 172.16/12 networks tests make
    my ($rc, $out, $err) = docker({ timeout => 60 }, 'swarm', 'init',
        '--advertise-addr', '127.0.0.1', '--default-addr-pool', '10.213.0.0/16',
        '--default-addr-pool-mask-length', '24');
    BAIL_OUT("docker swarm init: $err") if $rc;
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
    my $d = $y->[0];
    my $svc = $d->{services};
    is_deeply([sort keys %$svc], [qw(egress mcp redis runner)], 'redis, mcp, egress, runner');
    like(join(' ', @{ $svc->{redis}{command} }), qr/--appendonly yes/, 'redis: AOF');
    ok(($svc->{mcp}{deploy}{replicas} // 0) >= 2, 'mcp: replicas')
        and is($svc->{mcp}{ports}[0]{mode}, 'ingress', '... behind the routing mesh');
    is($svc->{$_}{deploy}{mode}, 'global', "$_: one per sandbox node") for qw(egress runner);
    like(join(' ', @{ $svc->{runner}{command} }), qr/--backend=swarm/, 'runner: --backend=swarm');
    is($d->{networks}{sandboxes}{internal}, 'true', 'the sandboxes\' network is internal');
    is_deeply($svc->{egress}{networks}{sandboxes}{aliases}, ['egress'], '... the egress on it as egress');
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
# 3. the runner tests, against the swarm backend

# SMCP_TEST_SWARM_QUICK=1: parts 1 and 2 only (while working on them)
swarm_run($_) for $ENV{SMCP_TEST_SWARM_QUICK} ? () : qw(runner.t runner_failures.t runner_reattach.t);

my (undef, $left) = docker('service', 'ls', '-q', '--filter', 'label=smcp.runner');
note("services left by others: $left") if $left =~ /\S/;

note(sprintf('total %.1f s', time() - $T0));
done_testing;
