package SMCP::Docker;

# Docker helpers for the tests, core Perl only (drives the `docker` CLI).
#
#   use lib 't/lib';
#   use SMCP::Docker qw(:all);
#   ensure_docker(root => 1);          # dockerd + base image, or skip_all
#                                      # (a failure under CI=true)
#   my $net = sandbox_net_up(egress_port => $port);   # runner/sandbox-net
#   my $cid = run_container(sandbox => 1, network => $net->{name},
#                           dns => [$net->{gateway}], cmd => ['sleep', 'infinity']);
#   my ($rc, $out, $err) = exec_in($cid, ['id', '-u'], timeout => 5);
#
# Everything a test file creates carries the label smcp.test=<test_id()>,
# unique per test file run; an END block removes those containers and
# networks (sandbox-net networks through `runner/sandbox-net down`, which
# also removes their iptables rules) and stops the processes started with
# fork_child()/tcp_listener(), by PID.  Leftovers of test runs whose process
# is gone (killed with -9) are swept by ensure_docker().
#
# Environment: DOCKER (the CLI, default `docker` on PATH), SMCP_TEST_IMAGE
# (default smcp-base:bookworm), SMCP_TEST_KEEP=1 keeps containers and
# networks (their label is printed), CI=true turns skips into failures.

use strict;
use warnings;

use Exporter qw(import);
use File::Basename qw(basename);
use File::Temp ();
use IO::Select;
use IO::Socket::INET;
use IO::Socket::UNIX;
use POSIX qw(:sys_wait_h);
use Socket qw(SHUT_WR);
use Test::More ();
use Time::HiRes qw(time sleep);

use SMCP::Test qw(repo_root run_cmd prereq_fail which_bin);

our @EXPORT_OK = qw(
    docker_available ensure_docker ensure_dockerd restart_dockerd
    ensure_base_image base_image
    sandbox_image ensure_sandbox_image image_from_sandbox
    test_id test_label docker run_cmd
    create_container run_container start_container remove_container
    exec_in probe_tcp container_ip container_inspect_field open_gate
    attach_stdin
    run_sandbox run_token
    create_network remove_network network_gateway free_subnet host_ip
    sandbox_net_up sandbox_net_down sandbox_net_rules sandbox_net_script
    egress_relay_up
    bridge_name fork_child orphaned tcp_listener stop_child cleanup
);
our %EXPORT_TAGS = (all => \@EXPORT_OK);

my $OWNER = $$;
my $SEQ = 0;
my (%CHILDREN, @SANDBOX_NETS, %SUBNETS_GIVEN, $TEST_ID, $PARENT);

sub sandbox_net_script { return repo_root() . '/runner/sandbox-net' }

sub base_image { return $ENV{SMCP_TEST_IMAGE} // 'smcp-base:bookworm' }

sub _docker_bin { return $ENV{DOCKER} // 'docker' }

# a value unique to this test file run: <file>-<pid>-<hex>
sub test_id {
    return $TEST_ID if defined $TEST_ID;
    my $f = basename($0);
    $f =~ s/\.t$//;
    $f =~ s/[^A-Za-z0-9]+/_/g;
    $f = substr($f, 0, 20);
    $TEST_ID = sprintf('%s-%d-%04x', $f, $$, int(rand(65536)));
    return $TEST_ID;
}

sub test_label { return 'smcp.test=' . test_id() }

##############################################################################
# running commands (run_cmd: SMCP::Test's, exported here too)

# docker(@args) -> (rc, stdout, stderr); docker({timeout => S}, @args)
sub docker {
    my %o = ref $_[0] eq 'HASH' ? %{ shift() } : ();
    return run_cmd([_docker_bin(), @_], %o);
}

# docker or die: returns stdout without the trailing newline
sub _docker_ok {
    my ($rc, $out, $err) = docker(@_);
    my @args = grep { !ref } @_;
    die "docker @args failed (exit $rc): $err$out" if $rc != 0;
    chomp $out;
    return $out;
}

##############################################################################
# engine and image

# the engine answers on its socket
sub docker_available {
    my ($rc) = run_cmd(['curl', '-fs', '--max-time', '3', '--unix-socket',
                        '/var/run/docker.sock', 'http://localhost/_ping'],
                       timeout => 10);
    return $rc == 0 ? 1 : 0;
}

# start dockerd when nothing answers; returns (1) or (0, message)
sub ensure_dockerd {
    return (1) if docker_available();
    my $script = repo_root() . '/.ci/start-dockerd';
    my ($rc, $out, $err) = run_cmd([$script], timeout => 60);
    return (1) if $rc == 0 && docker_available();
    return (0, "no Docker engine ($script failed: $err$out)");
}

# restart_dockerd() -> seconds it took, or dies: this machine's engine
# stopped and started again (bench/soak's dockerd_restart): systemd's
# docker unit where systemd runs it, otherwise every dockerd process
# TERMed, waited for (it stops its containers first) and
# .ci/start-dockerd.  Containers of others stop with it unless the engine
# has live-restore.
sub restart_dockerd {
    my $t0 = time();
    if (which_bin('systemctl')
        && system('systemctl is-active --quiet docker 2>/dev/null') == 0)
    {
        my ($rc, $out, $err) = run_cmd(['systemctl', 'restart', 'docker'],
                                       timeout => 180);
        die "systemctl restart docker: $err$out\n" if $rc != 0;
    } else {
        my @pids = grep { /^\d+$/ } split ' ', `pgrep -x dockerd`;
        die "no dockerd process to restart\n" unless @pids;
        kill 'TERM', @pids;
        SMCP::Test::wait_until(120, sub { !grep { kill 0, $_ } @pids }, 0.2)
            or die "dockerd (@pids) still up 120 s after TERM\n";
    }
    my ($ok, $msg) = ensure_dockerd();
    die "$msg\n" unless $ok;
    return time() - $t0;
}

# build the base image when missing; returns (1) or (0, message)
sub ensure_base_image {
    my ($image) = @_;
    $image //= base_image();
    my $script = repo_root() . '/.ci/build-base-image';
    my ($rc, $out, $err) = run_cmd([$script, $image], timeout => 900);
    return (1) if $rc == 0;
    return (0, "no base image $image ($script failed: $err$out)");
}

# the sandbox image the runner starts: $SMCP_SANDBOX_IMAGE, or the tag
# runner/sandbox/build-image makes by default
sub sandbox_image { return $ENV{SMCP_SANDBOX_IMAGE} // 'smcp-sandbox:1.18.33' }

# ensure_sandbox_image() -> (image, seconds it took): built (or found up to
# date) by runner/sandbox/build-image, or prereq_fail with its message
sub ensure_sandbox_image {
    my $image = sandbox_image();
    my $t0 = time();
    my ($rc, $out, $err) = run_cmd([repo_root() . '/runner/sandbox/build-image', $image],
                                   timeout => 900);
    prereq_fail("sandbox image $image: runner/sandbox/build-image failed: $err$out")
        if $rc != 0;
    return ($image, time() - $t0);
}

# image_from_sandbox(TAG, DOCKERFILE LINES) -> TAG: an image built FROM
# the sandbox image (metadata, a file: seconds), as an operator's own
# image is; removed at the end of the test file
my @FROM_IMAGES;

sub image_from_sandbox {
    my ($tag, @lines) = @_;
    my $dir = File::Temp::tempdir('smcp-from-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    open(my $fh, '>', "$dir/Dockerfile") or die "$dir/Dockerfile: $!";
    print $fh join("\n", 'FROM ' . sandbox_image(), @lines), "\n";
    close $fh;
    my ($rc, $out, $err) = docker({ timeout => 300 }, 'build', '-q', '-t', $tag, $dir);
    die "docker build $tag: $err$out" if $rc;
    push @FROM_IMAGES, $tag;
    return $tag;
}

END {
    if ($$ == $OWNER && @FROM_IMAGES && !$ENV{SMCP_TEST_KEEP}) {
        local $?;
        docker('image', 'rm', '-f', @FROM_IMAGES);
    }
}

# ensure_docker(root => 1, image => 1|NAME): the engine (and, unless
# image => 0, the base image) or plan skip_all; under CI a failure.
sub ensure_docker {
    my (%o) = @_;
    my @missing;
    if ($o{root} && $> != 0) {
        push @missing, 'root (iptables, dockerd)';
    } elsif (!which_bin('dockerd') && !docker_available()) {
        push @missing, 'dockerd (apt-get install docker.io; .ci/install-deps)';
    } else {
        my ($ok, $msg) = ensure_dockerd();
        push @missing, $msg unless $ok;
        if ($ok && ($o{image} // 1)) {
            my $img = ($o{image} // 1) eq '1' ? base_image() : $o{image};
            ($ok, $msg) = ensure_base_image($img);
            push @missing, $msg unless $ok;
        }
    }
    prereq_fail(join('; ', @missing)) if @missing;
    SMCP::Test::install_signal_handlers();
    sweep_stale();
    Test::More::diag('SMCP_TEST_KEEP: leaving everything labelled ' . test_label())
        if $ENV{SMCP_TEST_KEEP};
    return 1;
}

##############################################################################
# containers

my %PRESET_SANDBOX = (
    user              => '1000:1000',
    read_only         => 1,
    cap_drop          => ['ALL'],
    no_new_privileges => 1,
    tmpfs             => {
        '/tmp'          => 'rw,nosuid,nodev,size=64m,mode=1777',
        '/home/sandbox' => 'rw,nosuid,nodev,size=16m,uid=1000,gid=1000,mode=0700',
    },
    env               => { HOME => '/home/sandbox' },
);

# the `docker create` / `docker run` arguments of %o:
#   image (default base_image()), name (default <test_id>-<n>), user,
#   network, ip, network_alias, env ({K => V} or ['K=V']), labels ({K => V}),
#   read_only, tmpfs ({path => options}), cap_drop (['ALL']), cap_add,
#   no_new_privileges, dns ([ip]), dns_options (['timeout:1']), add_hosts
#   (['name:ip']), init, memory ('256m'), pids_limit, cpus, workdir,
#   hostname, entrypoint, extra ([raw arguments]), cmd ([argv]).
#   sandbox => 1 presets user 1000:1000, read-only root, tmpfs /tmp and
#   /home/sandbox, cap-drop ALL, no-new-privileges, HOME=/home/sandbox
#   (explicit options win).
sub _container_args {
    my (%o) = @_;
    if ($o{sandbox}) {
        for my $k (keys %PRESET_SANDBOX) {
            $o{$k} = $PRESET_SANDBOX{$k} unless exists $o{$k};
        }
    }
    my @a;
    my $name = $o{name} // sprintf('%s-c%d', test_id(), ++$SEQ);
    push @a, '--name', $name;
    push @a, '--label', test_label(), '--label', "smcp.test.pid=$$";
    my $labels = $o{labels} || {};
    push @a, '--label', "$_=$labels->{$_}" for sort keys %$labels;
    push @a, '--user', $o{user} if defined $o{user};
    push @a, '--network', $o{network} if defined $o{network};
    push @a, '--ip', $o{ip} if defined $o{ip};
    push @a, '--network-alias', $o{network_alias} if defined $o{network_alias};
    my $env = $o{env};
    if (ref $env eq 'HASH') {
        push @a, '--env', "$_=$env->{$_}" for sort keys %$env;
    } elsif (ref $env eq 'ARRAY') {
        push @a, '--env', $_ for @$env;
    }
    push @a, '--read-only' if $o{read_only};
    my $tmpfs = $o{tmpfs} || {};
    for my $p (sort keys %$tmpfs) {
        push @a, '--tmpfs', length($tmpfs->{$p} // '') ? "$p:$tmpfs->{$p}" : $p;
    }
    push @a, '--cap-drop', $_ for @{ $o{cap_drop} || [] };
    push @a, '--cap-add', $_ for @{ $o{cap_add} || [] };
    push @a, '--security-opt', 'no-new-privileges' if $o{no_new_privileges};
    push @a, '--dns', $_ for @{ $o{dns} || [] };
    push @a, '--dns-option', $_ for @{ $o{dns_options} || [] };
    push @a, '--add-host', $_ for @{ $o{add_hosts} || [] };
    push @a, '--init' if $o{init};
    push @a, '--memory', $o{memory} if defined $o{memory};
    push @a, '--pids-limit', $o{pids_limit} if defined $o{pids_limit};
    push @a, '--cpus', $o{cpus} if defined $o{cpus};
    push @a, '--workdir', $o{workdir} if defined $o{workdir};
    push @a, '--hostname', $o{hostname} if defined $o{hostname};
    push @a, '--entrypoint', $o{entrypoint} if defined $o{entrypoint};
    push @a, @{ $o{extra} || [] };
    push @a, $o{image} // base_image();
    push @a, @{ $o{cmd} || [] };
    return @a;
}

# create_container(%o) -> container id (dies with docker's message)
sub create_container {
    my (%o) = @_;
    return _docker_ok({ timeout => 60 }, 'create', _container_args(%o));
}

# run_container(%o) -> container id, started (detached)
sub run_container {
    my (%o) = @_;
    return _docker_ok({ timeout => 60 }, 'run', '-d', _container_args(%o));
}

sub start_container {
    my ($id) = @_;
    _docker_ok({ timeout => 60 }, 'start', $id);
    return 1;
}

# remove_container($id): force, with its anonymous volumes; 1 when gone
sub remove_container {
    my ($id) = @_;
    my ($rc, $out, $err) = docker({ timeout => 60 }, 'rm', '-f', '-v', $id);
    return 1 if $rc == 0 || $err =~ /No such container/i;
    Test::More::diag("docker rm -f $id: $err");
    return 0;
}

# exec_in($id, [cmd...], timeout => S (default 30), user => U, env => {..},
#         workdir => D, stdin => STRING) -> (exit code, stdout, stderr).
# The command runs under `timeout` inside the container (so it really stops:
# exit 124 when it ran out of time) and the CLI is killed on the host side
# a little later as a safety net.
sub exec_in {
    my ($id, $cmd, %o) = @_;
    my $t = $o{timeout} // 30;
    my @a = ('exec');
    push @a, '-i' if defined $o{stdin};
    push @a, '--user', $o{user} if defined $o{user};
    push @a, '--workdir', $o{workdir} if defined $o{workdir};
    my $env = $o{env} || {};
    push @a, '--env', "$_=$env->{$_}" for sort keys %$env;
    push @a, $id;
    push @a, 'timeout', '-k', '2', $t unless $o{no_timeout};
    push @a, @$cmd;
    return docker({ timeout => $t + 15, stdin => $o{stdin} }, @a);
}

# run_sandbox($runId, all => 1) -> the id of the run's running sandbox
# (all: in any state), '' when none: label smcp.run, or a pooled sandbox
# the run took, named smcp-<runId> (its labels were set before the run)
sub run_sandbox {
    my ($run, %o) = @_;
    my @ps = ('ps', ($o{all} ? '-a' : ()), '-q', '--no-trunc', '--filter');
    my (undef, $ids) = docker(@ps, "label=smcp.run=$run");
    (undef, $ids) = docker(@ps, "name=smcp-$run") unless ($ids // '') =~ /\S/;
    return (split ' ', $ids // '')[0] // '';
}

# run_token($runId) -> the run's sandbox token, '' when none: in its
# container's environment, or, a pooled sandbox's (given the run after it
# was made), where its entry script keeps it: the warm server's relay file,
# else the agent's environment
sub run_token {
    my ($run) = @_;
    my $id = run_sandbox($run) or return '';
    my (undef, $env) = docker('inspect', '--format', '{{range .Config.Env}}{{println .}}{{end}}', $id);
    return $1 if ($env // '') =~ /^SMCP_RUN_TOKEN=(\S+)$/m;
    my (undef, $out) = exec_in($id, ['sh', '-c', 'cat /tmp/smcp-warm/token 2>/dev/null '
        . '|| for p in /proc/[0-9]*; do tr "\\0" "\\n" < $p/environ 2>/dev/null; done '
        . '| sed -n "s/^SMCP_RUN_TOKEN=//p" | head -n 1'], timeout => 20);
    return ($out // '') =~ /^([\w-]+\.[\w-]+\.[\w-]+)\s*$/ ? $1 : '';
}

# open_gate($runId, $mark) -> 1 when done: the file /tmp/<mark> made in
# the run's running sandbox (run_sandbox), which SMCP::Stack::gate_step
# waits for
sub open_gate {
    my ($run, $mark) = @_;
    my $id = run_sandbox($run) or return 0;
    my ($rc) = exec_in($id, ['touch', "/tmp/$mark"], timeout => 20);
    return $rc == 0;
}

# probe_tcp($id, $host, $port, timeout => S (3), read => S (2)): a TCP
# connect from inside the container with bash's /dev/tcp, then what the
# peer sends within `read` seconds -> {connected, refused, reply, rc,
# elapsed (the connect and read, timed inside), out (everything, for
# diag)}
my $PROBE_SH = <<'SH';
s=$EPOCHREALTIME
out=$(timeout "$3" bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 7; echo CONNECTED; [ "$3" = 0 ] || timeout "$3" cat <&3' x "$1" "$2" "$4" 2>&1)
rc=$?
e=$EPOCHREALTIME
printf 'rc=%s start=%s end=%s\n%s\n' "$rc" "$s" "$e" "$out"
SH

sub probe_tcp {
    my ($id, $host, $port, %o) = @_;
    my $t = $o{timeout} // 3;
    my ($rc, $out, $err) = exec_in($id, ['bash', '-c', $PROBE_SH, 'probe', $host, $port,
                                         $t, $o{read} // 2], timeout => $t + 10);
    my %r = (out => "rc=$rc $out$err", rc => -1, connected => 0, elapsed => 0, reply => '',
             refused => 0);
    if ($out =~ /^rc=(\d+) start=([\d.]+) end=([\d.]+)\n(.*)\z/s) {
        @r{qw(rc elapsed)} = ($1, $3 - $2);
        my $o = $4;
        $r{connected} = $o =~ s/^CONNECTED\n//m ? 1 : 0;
        $r{reply} = $o;
        $r{refused} = $o =~ /Connection refused/ ? 1 : 0;
    }
    return \%r;
}

# a field of `docker inspect` via a Go template, e.g. '{{.State.Status}}'
sub container_inspect_field {
    my ($id, $format) = @_;
    my ($rc, $out) = docker('inspect', '--format', $format, $id);
    return undef if $rc != 0;
    chomp $out;
    return $out;
}

# bytes written on a container's stdin through the Engine API's attach, as
# the runner hands a pooled sandbox its run (runner/attach.c), then our
# side closed: dockerd's status (101 when written), or undef
sub attach_stdin {
    my ($id, $bytes) = @_;
    my $sock = IO::Socket::UNIX->new(Peer => '/var/run/docker.sock', Timeout => 10)
        or return undef;
    print $sock "POST /v1.41/containers/$id/attach?stream=1&stdin=1 HTTP/1.1\r\n"
        . "Host: localhost\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
        . "Content-Length: 0\r\n\r\n";
    my $head = '';
    while ($head !~ /\r\n\r\n\z/ && length($head) < 4096) {
        my $n = sysread($sock, my $c, 1);
        last unless $n;
        $head .= $c;
    }
    my ($st) = $head =~ m{^HTTP/1\.[01] (\d{3}) };
    if (($st // 0) == 101) {
        print $sock $bytes;
        $sock->flush;
    }
    shutdown($sock, SHUT_WR);
    close($sock);
    return $st;
}

# the container's IPv4 address on a network (or its only one)
sub container_ip {
    my ($id, $network) = @_;
    my $f = defined $network
        ? qq({{with index .NetworkSettings.Networks "$network"}}{{.IPAddress}}{{end}})
        : '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}';
    my $ip = container_inspect_field($id, $f) // '';
    $ip =~ s/\s+$//;
    ($ip) = split ' ', $ip;
    return $ip;
}

##############################################################################
# networks

sub _ip2int { my @o = split /\./, $_[0]; return ($o[0] << 24) | ($o[1] << 16) | ($o[2] << 8) | $o[3] }
sub _int2ip { my $n = shift; return join '.', map { ($n >> $_) & 255 } 24, 16, 8, 0 }

# IPv4 ranges in use: Docker networks' subnets, host routes and addresses
sub _used_ranges {
    my @cidrs;
    my ($rc, $ids) = docker('network', 'ls', '-q');
    my @ids = split ' ', $ids;
    if (@ids) {
        my (undef, $out) = docker('network', 'inspect', '--format',
                                  '{{range .IPAM.Config}}{{.Subnet}} {{end}}', @ids);
        push @cidrs, split ' ', $out;
    }
    for my $c (['ip', '-4', '-o', 'route', 'show', 'table', 'all'],
               ['ip', '-4', '-o', 'addr', 'show']) {
        my (undef, $out) = run_cmd($c, timeout => 10);
        push @cidrs, $out =~ m{\b(\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?)\b}g;
    }
    my @r;
    for my $c (@cidrs) {
        my ($ip, $len) = $c =~ m{^(\d+\.\d+\.\d+\.\d+)(?:/(\d+))?$} or next;
        $len //= 32;
        my $n = _ip2int($ip);
        my $size = 2 ** (32 - $len);
        my $start = $n - ($n % $size);
        push @r, [$start, $start + $size - 1];
    }
    return @r;
}

# a /24 inside 172.16.0.0/12 (172.29.x.0 first) that no Docker network,
# host route or address uses (and not handed out before by this process);
# random among the free ones of the first /16 that has any, so test files
# running in parallel rarely collide (callers retry).  Docker hands whole
# /16s of the same space to networks created without a subnet (compose,
# the runner's session networks), so one /16 may be taken entirely.
sub free_subnet {
    my @used = _used_ranges();
    for my $b (29, grep { $_ != 29 } 16 .. 31) {
        my @free;
        for my $x (0 .. 255) {
            next if $SUBNETS_GIVEN{"$b.$x"};
            my $s = _ip2int("172.$b.$x.0");
            my $e = $s + 255;
            next if grep { $_->[0] <= $e && $_->[1] >= $s } @used;
            push @free, $x;
        }
        next unless @free;
        my $x = $free[int(rand(@free))];
        $SUBNETS_GIVEN{"$b.$x"} = 1;
        return "172.$b.$x.0/24";
    }
    die "free_subnet: no free /24 left in 172.16.0.0/12\n";
}

# a bridge interface name (max 15 characters) not in use: smt<8 hex>
sub bridge_name {
    for (1 .. 50) {
        my $b = sprintf('smt%08x', int(rand(2**32)));
        return $b unless -e "/sys/class/net/$b";
    }
    die "bridge_name: no free name\n";
}

sub _retry_subnet_err { return $_[0] =~ /overlap|in use|already|conflict/i }

# create_network(name => N, subnet => 'auto'|CIDR|undef (Docker's pool),
#   internal => 1, bridge => NAME, options => {k => v}, labels => {k => v})
# -> { name, subnet, gateway, id }.  Default subnet: a free one (auto).
sub create_network {
    my (%o) = @_;
    my $name = $o{name} // sprintf('%s-n%d', test_id(), ++$SEQ);
    my $auto = !exists $o{subnet} || (defined $o{subnet} && $o{subnet} eq 'auto');
    my $err = '';
    for my $try (1 .. ($auto ? 8 : 1)) {
        my $subnet = $auto ? free_subnet() : $o{subnet};
        my @a = ('network', 'create', '--driver', 'bridge',
                 '--label', test_label(), '--label', "smcp.test.pid=$$");
        push @a, '--internal' if $o{internal};
        if (defined $subnet) {
            my ($ip) = split m{/}, $subnet;
            push @a, '--subnet', $subnet,
                     '--gateway', $o{gateway} // _int2ip(_ip2int($ip) + 1);
        }
        push @a, '-o', "com.docker.network.bridge.name=$o{bridge}" if defined $o{bridge};
        my $opts = $o{options} || {};
        push @a, '-o', "$_=$opts->{$_}" for sort keys %$opts;
        my $labels = $o{labels} || {};
        push @a, '--label', "$_=$labels->{$_}" for sort keys %$labels;
        my ($rc, $out, $e) = docker({ timeout => 60 }, @a, $name);
        if ($rc == 0) {
            chomp $out;
            return { name => $name, id => $out, network_gateway($name) };
        }
        $err = $e;
        last unless $auto && _retry_subnet_err($e);
    }
    die "create_network $name failed: $err";
}

sub remove_network {
    my ($name) = @_;
    my ($rc, $out, $err) = docker({ timeout => 60 }, 'network', 'rm', $name);
    return 1 if $rc == 0 || $err =~ /not found|No such network/i;
    Test::More::diag("docker network rm $name: $err");
    return 0;
}

# (subnet => ..., gateway => ...) of a network's first IPv4 config (for
# Docker's default `bridge`, the gateway is docker0's address)
sub network_gateway {
    my ($name) = @_;
    my ($rc, $out) = docker('network', 'inspect', '--format',
        '{{index .Options "com.docker.network.bridge.name"}}|'
      . '{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}} {{end}}', $name);
    return () if $rc != 0;
    chomp $out;
    my ($br, $cfg) = split /\|/, $out, 2;
    my ($subnet, $gw) = split ' ', $cfg // '';
    if (!$gw && $br) {
        # the default bridge does not list its gateway: ask the interface
        my (undef, $a) = run_cmd(['ip', '-4', '-o', 'addr', 'show', 'dev', $br],
                                 timeout => 10);
        ($gw) = $a =~ /inet (\d+\.\d+\.\d+\.\d+)/;
    }
    return (subnet => $subnet, gateway => $gw);
}

# the host's IPv4 address on the interface of its default route (undef
# when there is none)
sub host_ip {
    my (undef, $r) = run_cmd(['ip', '-4', '-o', 'route', 'show', 'default'], timeout => 10);
    my ($dev) = $r =~ /\bdev (\S+)/ or return undef;
    my (undef, $a) = run_cmd(['ip', '-4', '-o', 'addr', 'show', 'dev', $dev], timeout => 10);
    return ($a =~ /inet (\d+\.\d+\.\d+\.\d+)/)[0];
}

# sandbox_net_up(egress_port => P, name => N, bridge => B, subnet => CIDR)
# -> { name, bridge, subnet, gateway }: `runner/sandbox-net up` (retrying
# another free subnet when the first collides); dies with the script's
# message.  Removed (network and rules) at the end of the test file.
sub sandbox_net_up {
    my (%o) = @_;
    die "sandbox_net_up: egress_port needed\n" unless $o{egress_port};
    my $name = $o{name} // sprintf('smcpt-%s-s%d', test_id(), ++$SEQ);
    my $bridge = $o{bridge} // bridge_name();
    my $auto = !defined $o{subnet};
    my $err = '';
    for my $try (1 .. ($auto ? 8 : 1)) {
        my $subnet = $o{subnet} // free_subnet();
        my ($rc, $out, $e) = run_cmd([sandbox_net_script(), 'up', $name, $bridge,
                                      $subnet, $o{egress_port}, test_label(),
                                      "smcp.test.pid=$$"], timeout => 60);
        push @SANDBOX_NETS, [$name, $bridge]
            unless grep { $_->[0] eq $name } @SANDBOX_NETS;
        if ($rc == 0) {
            chomp $out;
            return { name => $name, bridge => $bridge, subnet => $subnet,
                     gateway => $out, stdout => "$out\n", stderr => $e };
        }
        $err = $e . $out;
        last unless $auto && _retry_subnet_err($e);
    }
    die "sandbox-net up $name failed: $err";
}

# egress_relay_up($net, port => EGRESS_PORT, limit => N, image => I,
#                 name => N) -> { name, id, ip }: runner/egress-relay as
# `SMCP_BACKEND=swarm make up` runs it: a container at the last address
# of the sandbox network $net (sandbox_net_up's), forwarding PORT to the
# gateway, at most `limit` connections per sandbox; the network's rules
# made anew with SMCP_EGRESS_RELAY (its connection limit not for the
# relay's address).  Removed with the test's containers.
sub egress_relay_up {
    my ($net, %o) = @_;
    my ($a, $len) = $net->{subnet} =~ m{^([\d.]+)/(\d+)$} or die "bad subnet";
    my $ip = _int2ip(_ip2int($a) + 2 ** (32 - $len) - 2);
    my ($rc, $out, $err) = run_cmd(['env', "SMCP_EGRESS_RELAY=$ip", sandbox_net_script(),
                                    'up', $net->{name}, $net->{bridge}, $net->{subnet},
                                    $o{port}], timeout => 60);
    die "sandbox-net up (relay $ip): $err$out" if $rc;
    my $relay = repo_root() . '/runner/egress-relay';
    my $name = $o{name} // sprintf('%s-relay%d', test_id(), ++$SEQ);
    my $id = run_container(name => $name, network => $net->{name}, ip => $ip,
        image => $o{image} // sandbox_image(),
        labels => { 'smcp.relay' => '1' }, read_only => 1, user => '65534',
        cap_drop => ['ALL'], no_new_privileges => 1,
        extra => ['-v', "$relay:/egress-relay:ro"], entrypoint => 'perl',
        cmd => ['/egress-relay', $o{port}, $net->{gateway},
                $o{limit} // $ENV{SMCP_EGRESS_CONNLIMIT} // 64]);
    return { name => $name, id => $id, ip => $ip };
}

# sandbox_net_down($name, $bridge) -> (rc, stdout, stderr)
sub sandbox_net_down {
    my ($name, $bridge) = @_;
    my @r = run_cmd([sandbox_net_script(), 'down', $name, $bridge], timeout => 60);
    @SANDBOX_NETS = grep { $_->[0] ne $name } @SANDBOX_NETS if $r[0] == 0;
    return @r;
}

# the iptables / ip6tables INPUT rules (`-S` lines, chain order) tagged for
# a sandbox-net network: (\@v4, \@v6); with counters => 1 they carry `-c P B`
sub sandbox_net_rules {
    my ($name, %o) = @_;
    my @res;
    for my $cmd (qw(iptables ip6tables)) {
        my (undef, $out) = run_cmd([$cmd, '-w', ($o{counters} ? '-v' : ()),
                                    '-S', 'INPUT'], timeout => 30);
        push @res, [grep { index($_, qq(--comment "smcp:$name")) >= 0 }
                    split /\n/, $out];
    }
    return @res;
}

##############################################################################
# processes

# fork_child(sub { ... }) -> pid.  The child runs the code and exits with
# POSIX::_exit (never the parent's END blocks); stopped at the end by PID.
# A long-running child should poll orphaned() (say once a second) and
# return when it is true: the test was killed before it could stop it.
sub fork_child {
    my ($code, $desc) = @_;
    my $parent = $$;
    my $pid = fork();
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        $PARENT = $parent;
        $SIG{$_} = 'DEFAULT' for qw(INT TERM HUP PIPE);
        open(STDIN, '<', '/dev/null');
        eval { $code->(); 1 } or print STDERR "child ($desc): $@";
        POSIX::_exit(0);
    }
    $CHILDREN{$pid} = $desc // 'child';
    return $pid;
}

# tcp_listener(addr => IP, port => P (0: any), reply => STRING)
#   -> (pid, port).  Listening before it returns.  Each connection: read
# what the peer sends within 0.3 s (a request, or nothing), write the reply,
# half-close, drain, close.  One connection at a time.
sub tcp_listener {
    my (%o) = @_;
    my $srv = IO::Socket::INET->new(
        LocalAddr => $o{addr} // '127.0.0.1', LocalPort => $o{port} // 0,
        Proto => 'tcp', Listen => 16, ReuseAddr => 1,
    ) or die "tcp_listener: bind $o{addr}:$o{port}: $!\n";
    my $port = $srv->sockport;
    my $reply = $o{reply} // "smcp\n";
    my $pid = fork_child(sub {
        my $lsel = IO::Select->new($srv);
        until (orphaned()) {
            next unless $lsel->can_read(1);
            my $c = $srv->accept or next;
            binmode $c;
            my $sel = IO::Select->new($c);
            my $buf = '';
            my $until = time() + 0.3;
            while ($buf !~ /\r?\n\r?\n/ && (my $left = $until - time()) > 0) {
                last unless $sel->can_read($left);
                my $n = sysread($c, $buf, 65536, length $buf);
                last unless $n;
            }
            syswrite($c, $reply);
            shutdown($c, SHUT_WR);
            $until = time() + 1;
            while ((my $left = $until - time()) > 0) {
                last unless $sel->can_read($left);
                my $n = sysread($c, my $junk, 65536);
                last unless $n;
            }
            close $c;
        }
    }, "tcp listener $o{addr}:$port");
    close $srv;
    return ($pid, $port);
}

# in a fork_child() child: the test process that started it is gone
sub orphaned { return defined $PARENT && getppid() != $PARENT ? 1 : 0 }

sub stop_child {
    my ($pid) = @_;
    return unless $pid && $CHILDREN{$pid};
    kill 'TERM', $pid;
    my $deadline = time() + 5;
    while (time() < $deadline) {
        my $r = waitpid($pid, WNOHANG);
        last if $r == $pid || $r == -1;
        sleep(0.02);
    }
    if (kill 0, $pid) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
    delete $CHILDREN{$pid};
}

##############################################################################
# cleanup

# remove everything labelled with this file's test id, stop the children
sub cleanup {
    stop_child($_) for keys %CHILDREN;
    return if $ENV{SMCP_TEST_KEEP};
    _remove_labelled('smcp.test=' . test_id()) if defined $TEST_ID;
    for my $n (@SANDBOX_NETS) {
        my ($rc, $out, $err) = sandbox_net_down(@$n);
        Test::More::diag("cleanup: sandbox-net down @$n: $err") if $rc != 0;
    }
}

sub _remove_labelled {
    my ($label) = @_;
    my ($rc, $out) = docker('ps', '-aq', '--filter', "label=$label");
    my @c = split ' ', $out;
    if (@c) {
        my ($r, $o, $e) = docker({ timeout => 120 }, 'rm', '-f', '-v', @c);
        Test::More::diag("cleanup: docker rm: $e") if $r != 0;
    }
    (undef, $out) = docker('network', 'ls', '-q', '--filter', "label=$label");
    for my $id (split ' ', $out) {
        my (undef, $info) = docker('network', 'inspect', '--format',
            '{{.Name}}|{{index .Labels "smcp.network"}}|{{index .Options "com.docker.network.bridge.name"}}', $id);
        chomp $info;
        my ($name, $sn, $br) = split /\|/, $info;
        next unless defined $name;
        if (length($sn // '') && length($br // '')) {
            my ($r, $o, $e) = sandbox_net_down($name, $br);
            Test::More::diag("cleanup: sandbox-net down $name: $e") if $r != 0;
        } else {
            remove_network($name);
        }
    }
}

# leftovers of earlier test runs whose process no longer exists (killed
# before its END block ran): containers, networks, sandbox-net rules
sub sweep_stale {
    my %dead;
    for my $kind (['ps', '-a'], ['network', 'ls']) {
        my (undef, $out) = docker(@$kind, '--filter', 'label=smcp.test.pid',
            '--format', '{{.Label "smcp.test"}} {{.Label "smcp.test.pid"}}');
        for my $l (split /\n/, $out) {
            my ($id, $pid) = split ' ', $l;
            next unless defined $pid && $pid =~ /^\d+$/;
            next if $pid == $$ || kill(0, $pid);
            $dead{$id} = 1;
        }
    }
    _remove_labelled("smcp.test=$_") for sort keys %dead;
    # rules of test sandbox networks that no longer exist
    my (undef, $rules) = run_cmd(['iptables', '-w', '-S', 'INPUT'], timeout => 30);
    my %orphan;
    while ($rules =~ /-i (\S+) .*?--comment "smcp:(smcpt-[^"]+?-(\d+)-[0-9a-f]{4}-s\d+)"/g) {
        my ($br, $name, $pid) = ($1, $2, $3);
        next if $pid == $$ || kill(0, $pid);
        $orphan{$name} = $br;
    }
    for my $name (sort keys %orphan) {
        my ($rc) = docker('network', 'inspect', $name);
        next if $rc == 0;    # still there: its owner removes it
        run_cmd([sandbox_net_script(), 'down', $name, $orphan{$name}], timeout => 60);
    }
}

END {
    if ($$ == $OWNER) {
        local $?;
        cleanup();
    }
}

##############################################################################
# named volumes (added for t/egress_sandbox.t)
#
#   my $vol = create_volume();           # labelled smcp.test=<test_id()>
#   ... extra => ['--mount', "type=volume,src=$vol,dst=/workspace"] ...
#   remove_volume($vol);                 # its containers first, then it
#
# Volumes made here are removed at the end of the test file (after the
# containers using them); those of test runs whose process is gone are
# swept on the first create_volume().

push @EXPORT_OK, qw(create_volume remove_volume);

my (@VOLUMES, $VOLUMES_SWEPT);

# create_volume(name => N, labels => {k => v}) -> the volume's name
sub create_volume {
    my (%o) = @_;
    unless ($VOLUMES_SWEPT++) {
        my (undef, $out) = docker('volume', 'ls', '--filter', 'label=smcp.test.pid',
                                  '--format', '{{.Name}} {{.Label "smcp.test.pid"}}');
        for my $l (split /\n/, $out) {
            my ($v, $pid) = split ' ', $l;
            next unless defined $pid && $pid =~ /^\d+$/;
            next if $pid == $$ || kill(0, $pid);
            remove_volume($v);
        }
    }
    my $name = $o{name} // sprintf('%s-v%d', test_id(), ++$SEQ);
    my @a = ('volume', 'create', '--label', test_label(), '--label', "smcp.test.pid=$$");
    my $labels = $o{labels} || {};
    push @a, '--label', "$_=$labels->{$_}" for sort keys %$labels;
    my $v = _docker_ok({ timeout => 60 }, @a, $name);
    push @VOLUMES, $v;
    return $v;
}

# remove_volume($name): force-removes the containers using it, then the
# volume; 1 when gone
sub remove_volume {
    my ($name) = @_;
    my (undef, $out) = docker('ps', '-aq', '--filter', "volume=$name");
    remove_container($_) for split ' ', $out;
    my ($rc, undef, $err) = docker({ timeout => 60 }, 'volume', 'rm', '-f', $name);
    @VOLUMES = grep { $_ ne $name } @VOLUMES;
    return 1 if $rc == 0;
    Test::More::diag("docker volume rm $name: $err");
    return 0;
}

# runs before the END block above (END blocks run last-defined first)
END {
    if ($$ == $OWNER && @VOLUMES && !$ENV{SMCP_TEST_KEEP}) {
        local $?;
        remove_volume($_) for my @v = @VOLUMES;    # a copy: it shrinks
    }
}

1;
