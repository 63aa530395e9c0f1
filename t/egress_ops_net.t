#!/usr/bin/env perl
# The egress container's operations port (issue 22, point 10): in
# docker-compose the egress container joins every session's network, and
# its metrics and health listener (SMCP_METRICS_PORT, 9113) listened on
# every interface, so every sandbox reached it.  The entrypoint now binds
# it to loopback and the address that reaches Redis (SMCP_METRICS_ADDR=
# auto): a focused compose set-up with the nginx image (built from this
# tree), a stand-in `redis` on a backend network, the egress container on
# it, connected to a session's internal network as `egress` the way the
# runner does it, and a sandbox there: the egress listener answers the
# sandbox, the operations port refuses it (also after a restart of the
# egress container, whose default route may then be the session's
# network), and answers a container on the backend network and the
# container's own healthcheck.
#
# Needs Docker (a failure under CI=true); builds smcp-nginx:$SMCP_TEST_TAG
# (default test, as t/compose.t) on the base image, from Docker's cache
# when the tree has not changed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Docker qw(:all);
use SMCP::Test qw(repo_root rhex wait_until);

ensure_docker();

my $root = repo_root();
my $tag = ($ENV{SMCP_TEST_TAG} // '') =~ /^([\w.-]+)$/ ? $1 : 'test';
my $image = "smcp-nginx:$tag";
{
    my ($rc, $out, $err) = docker({ timeout => 900 }, 'build', '-q', '-f',
        "$root/ngx_sandbox_mcp_module/Dockerfile", '--build-arg', 'BASE=' . base_image(),
        '-t', $image, $root);
    is($rc, 0, "the nginx image $image builds") or SMCP::Test::give_up("docker build: $err");
}

my $backend = create_network();
my $session = create_network(internal => 1);

# a stand-in for redis: only its name on the backend network matters here
my $redis = run_container(network => $backend->{name}, network_alias => 'redis',
                          cmd => ['sleep', 'infinity']);
my $egress = run_container(image => $image, network => $backend->{name},
    env => { SMCP_ROLE => 'egress', PROXY_JWT_SECRET => rhex(32),
             SMCP_REDIS => 'redis:6379', SMCP_RESOLVER => '127.0.0.11' },
    extra => ['--tmpfs', '/run', '--tmpfs', '/var/lib/nginx']);
my $peer = run_container(network => $backend->{name}, cmd => ['sleep', 'infinity']);
{
    my ($rc, $out, $err) = docker('network', 'connect', '--alias', 'egress',
                                  $session->{name}, $egress);
    is($rc, 0, 'the egress container joins the session network as `egress`') or diag($err);
}
my $sandbox = run_container(sandbox => 1, network => $session->{name},
                            cmd => ['sleep', 'infinity']);

sub check {
    my ($when) = @_;
    ok(wait_until(60, sub { probe_tcp($peer, container_ip($egress, $backend->{name}), 8090)
                              ->{connected} }), "$when: the egress listens")
        or diag(join '', (docker('logs', $egress))[1, 2]);
    my $eip = container_ip($egress, $session->{name});
    my $p = probe_tcp($sandbox, $eip, 8090);
    ok($p->{connected}, "$when: the sandbox reaches the egress listener ($eip:8090)")
        or diag($p->{out});
    for my $port (9113) {
        my $x = probe_tcp($sandbox, $eip, $port);
        ok(!$x->{connected}, "$when: the sandbox does not reach the operations port $port")
            or diag($x->{out});
        my $b = probe_tcp($peer, container_ip($egress, $backend->{name}), $port);
        ok($b->{connected}, "$when: a container on the backend network does (control)")
            or diag($b->{out});
    }
    my ($rc, $out) = exec_in($egress, ['bash', '-c', 'exec 3<>/dev/tcp/127.0.0.1/9113 && '
                             . q{printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && head -n 1 <&3}]);
    like($out, qr/ 200 /, "$when: the healthcheck's loopback listener answers");
}

check('started');
{
    my ($rc, $out, $err) = docker({ timeout => 60 }, 'restart', $egress);
    is($rc, 0, 'the egress container restarts on both networks') or diag($err);
}
check('restarted');

remove_container($_) for ($sandbox, $peer, $egress, $redis);
remove_network($_->{name}) for ($session, $backend);
done_testing();
