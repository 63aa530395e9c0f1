#!/usr/bin/env perl
# docker-compose.sentinel.yml, the option of docker-compose.yml for Redis
# that fails over (issue 24, point 2), for real:
#
#   - `config` of the two files: nginx, egress and the runner get
#     SMCP_REDIS=sentinel://sentinel-1:26379,sentinel-2:26379,
#     sentinel-3:26379/smcp; the replica and the sentinels are on the
#     backend network alone and publish no port
#   - up (Redis with a password, its replica, three sentinels, nginx for
#     /mcp): the sentinels see the master, its replica and each other;
#     /mcp opens a session (written to Redis) through them
#   - the master's container killed: the sentinels make the replica the
#     master (its address, ROLE master), and /mcp opens a session again
#     within seconds (the figure printed); the session of before still
#     answers (it was replicated)
#   - the old master started again: it asks the sentinels and comes back
#     as the new master's replica (runner/redis/smcp-redis-start), not as
#     a second master; a sentinel restarted (its tmpfs state gone)
#     monitors the master the others name, not `redis`
#     (runner/redis/smcp-sentinel-start)
#   - down -v: nothing of the project is left
#
# Needs a Docker engine and docker-compose; builds the images it runs with
# the tags t/compose.t uses (smcp-*:test, SMCP_TEST_TAG), from the local
# base image.  Loopback and the project's own networks only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(:all);
use SMCP::Test qw(repo_root wait_until rhex prereq_fail which_bin free_port run_cmd);

my $root = repo_root();
my $compose_bin = which_bin('docker-compose');
prereq_fail('docker-compose missing (apt-get install docker-compose; .ci/install-deps)')
    unless $compose_bin;
ensure_docker();
ensure_base_image();

my $project = sprintf('smcps%dr%s', $$, rhex(3));
my $secret = rhex(32);
my $password = rhex(16);
my $port = free_port();

delete @ENV{ grep { /^SMCP_/ || /^(ANTHROPIC|OPENAI|GITHUB)_/ } keys %ENV };
my $tag = ($ENV{SMCP_TEST_TAG} // '') =~ /^([\w.-]+)$/ ? $1 : 'test';
$ENV{SMCP_BASE_IMAGE} = base_image();
$ENV{SMCP_NGINX_IMAGE} = "smcp-nginx:$tag";
$ENV{SMCP_REDIS_IMAGE} = "smcp-redis:$tag";
$ENV{SMCP_RUNNER_IMAGE} = "smcp-runner:$tag";
$ENV{PROXY_JWT_SECRET} = $secret;
$ENV{SMCP_REDIS_PASSWORD} = $password;
$ENV{SMCP_LISTEN} = "127.0.0.1:$port";
$ENV{SMCP_SENTINEL_DOWN_MS} = 1000;
$ENV{COMPOSE_INTERACTIVE_NO_CLI} = 1;
delete $ENV{COMPOSE_FILE};

sub compose {
    my ($args, %o) = @_;
    local $ENV{COMPOSE_PROJECT_NAME} = $project;
    return run_cmd([$compose_bin, '--ansi', 'never', '-f', "$root/docker-compose.yml",
                    '-f', "$root/docker-compose.sentinel.yml", '-p', $project, @$args],
                   timeout => $o{timeout} // 120);
}

my $up = 0;
END {
    my $status = $?;
    if ($up && !$ENV{SMCP_TEST_KEEP}) {
        if (!Test::More->builder->is_passing) {
            my (undef, $logs) = compose(['logs', '--no-color', '--tail', '40'], timeout => 30);
            print STDERR map { "# $_\n" } split /\n/, $logs;
        }
        compose(['down', '-v', '--remove-orphans', '-t', '5'], timeout => 120);
    }
    $? = $status;
}

###############################################################################
# the configuration

my ($rc, $cfg, $err) = compose(['config']);
is($rc, 0, 'docker-compose config of the two files') or diag($err);
my $want = 'sentinel://sentinel-1:26379,sentinel-2:26379,sentinel-3:26379/smcp';
for my $svc (qw(nginx egress runner)) {
    my ($block) = $cfg =~ /^  \Q$svc\E:\n(.*?)(?=^  \S)/ms;
    like($block // '', qr/^\s+SMCP_REDIS: \Q$want\E$/m, "$svc: SMCP_REDIS=$want");
}
for my $svc (qw(redis-replica sentinel-1 sentinel-2 sentinel-3)) {
    my ($block) = $cfg =~ /^  \Q$svc\E:\n(.*?)(?=^  \S|^\S)/ms;
    ok($block && $block =~ /networks:\n\s+backend:/ && $block !~ /^\s+ports:/m,
       "$svc: on the backend network, no port published");
}

###############################################################################
# up, and a session through the sentinels

($rc, undef, $err) = compose(['up', '-d', '--build', 'redis', 'redis-replica', 'sentinel-1',
                              'sentinel-2', 'sentinel-3', 'nginx'], timeout => 900);
$up = 1;
is($rc, 0, 'up: redis, its replica, three sentinels, nginx') or diag($err);

# a command to a sentinel (which has no password: the container's
# REDISCLI_AUTH, the master's, is not sent)
sub sentinel {
    my ($n, @cmd) = @_;
    my ($r, $out) = compose(['exec', '-T', "sentinel-$n", 'env', '-u', 'REDISCLI_AUTH',
                             'redis-cli', '--no-auth-warning', '-p', '26379', '--raw', @cmd],
                            timeout => 30);
    return $r == 0 ? $out : '';
}
# the fields of a flat reply (name, value, name, value ...) that are asked
sub fields {
    my ($out, @names) = @_;
    my @l = split /\n/, $out;
    my %want = map { $_ => 1 } @names;
    my %f;
    for my $i (0 .. $#l - 1) {
        $f{ $l[$i] } //= $l[$i + 1] if $want{ $l[$i] };
    }
    return %f;
}
sub container_addr {
    my ($svc) = @_;
    my (undef, $id) = compose(['ps', '-q', $svc], timeout => 30);
    chomp $id;
    return '' unless $id;
    my (undef, $ip) = docker('inspect', '--format',
        '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}', $id);
    return (split ' ', $ip)[0] // '';
}

my $master_ip = container_addr('redis');
my $replica_ip = container_addr('redis-replica');
my $last = '';
ok(wait_until(120, sub {
    $last = join "\n---\n", map { sentinel($_, 'SENTINEL', 'MASTER', 'smcp') } 1 .. 3;
    for my $n (1 .. 3) {
        my %m = fields(sentinel($n, 'SENTINEL', 'MASTER', 'smcp'),
                       qw(ip num-slaves num-other-sentinels));
        return 0 unless ($m{ip} // '') eq $master_ip && ($m{'num-slaves'} // 0) >= 1
                     && ($m{'num-other-sentinels'} // 0) >= 2;
    }
    return 1;
}, 1), "the sentinels see the master ($master_ip), its replica and each other")
    or diag($last);

my $t = SMCP::Test->client(port => $port, secret => $secret);
my $sid;
ok(wait_until(120, sub { $sid = eval { $t->initialize }; $sid }, 0.5),
   '/mcp opens a session through the sentinels');
my $r = $sid ? $t->rpc($sid, 'tools/list', {}) : {};
ok(@{ ($r->{json}{result} || {})->{tools} || [] } > 0, '... and answers in it');

###############################################################################
# the master killed

($rc, undef, $err) = compose(['kill', 'redis']);
is($rc, 0, 'the master\'s container killed') or diag($err);
my $t_kill = time();
sub named {
    my $out = sentinel($_[0], 'SENTINEL', 'get-master-addr-by-name', 'smcp');
    return (grep { /^[0-9a-f.:]+$/ && /[.:]/ } split /\n/, $out)[0] // '';
}
ok(wait_until(60, sub { named(1) eq $replica_ip && named(2) eq $replica_ip }, 0.2),
   "the sentinels name the replica ($replica_ip) the master")
    or diag('sentinel 1: ' . sentinel(1, 'SENTINEL', 'get-master-addr-by-name', 'smcp'));
my $promoted = time() - $t_kill;
my ($role_rc, $role) = compose(['exec', '-T', 'redis-replica', 'redis-cli',
                                '--no-auth-warning', '--raw', 'ROLE'], timeout => 30);
like($role, qr/^master$/m, '... whose ROLE is master');

my $sid2;
ok(wait_until(30, sub { $sid2 = eval { $t->initialize }; $sid2 }, 0.1),
   '/mcp opens a session again');
my $back = time() - $t_kill;
cmp_ok($back, '<', 30, sprintf('... within seconds (promoted %.1f s, /mcp %.1f s after the kill)',
                               $promoted, $back));
$r = $t->rpc($sid, 'tools/list', {});
ok(@{ ($r->{json}{result} || {})->{tools} || [] } > 0,
   'the session of before still answers (it was on the replica)');

###############################################################################
# the old master back, a sentinel restarted

($rc, undef, $err) = compose(['start', 'redis']);
is($rc, 0, 'the old master\'s container started again') or diag($err);
my $old_role = '';
ok(wait_until(60, sub {
    (undef, $old_role) = compose(['exec', '-T', 'redis', 'redis-cli', '--no-auth-warning',
                                  '--raw', 'ROLE'], timeout => 30);
    $old_role =~ /^slave\n\Q$replica_ip\E\n6379\n(connected|sync)/m;
}, 0.5), "it is the replica of the new master ($replica_ip), not a master")
    or diag($old_role);
my (undef, $rlog) = compose(['logs', '--no-color', 'redis'], timeout => 30);
like($rlog, qr/smcp-redis-start: the sentinels name \Q$replica_ip\E:6379 the master: its replica/,
     '... having asked the sentinels');

($rc, undef, $err) = compose(['restart', '-t', '1', 'sentinel-3'], timeout => 60);
is($rc, 0, 'sentinel 3 restarted') or diag($err);
ok(wait_until(60, sub { named(3) eq $replica_ip }, 0.5),
   "... it names the new master ($replica_ip)")
    or diag(sentinel(3, 'SENTINEL', 'MASTER', 'smcp'));
my (undef, $slog) = compose(['logs', '--no-color', 'sentinel-3'], timeout => 30);
like($slog, qr/smcp-sentinel-start: sentinel-\d:26379 names \Q$replica_ip\E:6379 the master/,
     '... as the other sentinels told it at its start');

###############################################################################
# down

($rc, undef, $err) = compose(['down', '-v', '--remove-orphans', '-t', '5'], timeout => 120);
is($rc, 0, 'down -v') or diag($err);
$up = 0;
for my $kind (['ps', '-aq'], ['network', 'ls', '-q'], ['volume', 'ls', '-q']) {
    my (undef, $ids) = docker(@$kind, '--filter', "label=com.docker.compose.project=$project");
    is($ids =~ /\S/ ? 1 : 0, 0, "no $kind->[0] of the project left");
}

done_testing;
