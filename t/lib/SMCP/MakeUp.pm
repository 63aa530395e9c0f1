package SMCP::MakeUp;

# `make up` as a test drives it: .ci/stack (what `make up` runs after `make
# up-check deps-run all`) in a temp state directory on free ports, with the
# egress side in front of fakes (a scripted Anthropic, a fake GitHub) on a
# sandbox network of its own, and `make down` at the end.
#
#   my $up = SMCP::MakeUp->new(text => 'done', backend => 'swarm');
#   my ($rc, $out) = $up->up;             # .ci/stack up: exit code, output
#   my ($rc, $out) = $up->make('retire-secret', KID => $kid);   # a target
#   my $res = $up->call($token, $sid, 'opencode_run_task', {...});
#   $up->down;                            # .ci/stack down (also at END)
#
# new() sets the process's environment for .ci/stack (SMCP_STATE,
# SMCP_LISTEN, SMCP_REDIS_PORT, ..., the provider key and base URL, the
# GitHub token and URLs) and returns the object holding the fakes and the
# ports; egress => 0 runs make up with SMCP_EGRESS=off (no Docker).
# script => [turns]: the fake model's script (SMCP::Fakes); scripts =>
# {MARK => [steps]}: the fake model plays them
# (SMCP::Fakes::scenario_script); else it answers `text`.
# checkout => 1: .ci/stack and make run from a checkout of this file's own
# ($up->top: symlinks to the tree's sources, build/ a copy of the tree's
# module and binaries, $up->build copies them again, new files as `make
# all` writes them), so that `make clean` and upgrades touch only it.
# state => 'default': SMCP_STATE unset, XDG_STATE_HOME a temp dir (make
# up's default state directory: $up->state is XDG_STATE_HOME/sandbox-mcp).
# registries => 1 also enables SMCP_REGISTRIES=npm,pypi in front of
# static stand-ins ($up->{npm}, {pypi}, {pyfiles}).  key => 0 leaves every
# model provider's key out (make up refuses to start), github => 0 the
# GitHub token; env => {NAME => value} sets more (undef: unset), last.
# nginx is started
# through a wrapper that records each instance's environment in
# $up->envdir/<conf>.env (a running master's /proc/PID/environ holds its
# process title instead).

use strict;
use warnings;

use File::Temp qw(tempdir);
use HTTP::Tiny;

use SMCP::Docker qw(free_subnet bridge_name test_id);
use SMCP::Fakes;
use SMCP::Test qw(free_port json_encode json_decode repo_root spew accessors
                  wait_until);

accessors(qw(state port rport mport emport eport net envdir egress fake gh
             npm pypi pyfiles top));

our $KEY = 'sk-ant-REAL-stack-0123456789';
our $GH_TOKEN = 'ghp_REAL_stack_0123456789';

my @LIVE;

sub new {
    my ($class, %o) = @_;
    my $self = bless {
        egress => $o{egress} // 1,
        state  => tempdir('smcp-stack-XXXXXX', TMPDIR => 1,
                          CLEANUP => !$ENV{SMCP_TEST_KEEP}),
        top    => repo_root(),
        port   => free_port(),
        rport  => free_port(),
        mport  => free_port(),      # the runner's metrics
        emport => free_port(),      # the egress instance's
        owner  => $$,
    }, $class;
    if (($o{state} // '') eq 'default') {
        # the nginx workers (nobody) pass through it to their temp dirs
        chmod 0711, $self->{state};
        delete $ENV{SMCP_STATE};
        $ENV{XDG_STATE_HOME} = $self->{state};
        $self->{state} .= '/sandbox-mcp';
    } else {
        $ENV{SMCP_STATE} = $self->{state};
    }
    $self->_checkout if $o{checkout};
    $ENV{SMCP_LISTEN} = "127.0.0.1:$self->{port}";
    $ENV{SMCP_REDIS_PORT} = $self->{rport};
    $ENV{SMCP_TENANT} = $o{tenant} // 'stack-tenant';
    $ENV{SMCP_REDIS_MAXMEMORY} = '512mb';
    $ENV{SMCP_RUNNER_METRICS} = "127.0.0.1:$self->{mport}";
    $ENV{SMCP_EGRESS_METRICS} = "127.0.0.1:$self->{emport}";
    delete $ENV{PROXY_JWT_SECRET};
    $self->_nginx_wrapper;
    # no key of the machine's own environment reaches make up
    delete @ENV{qw(ANTHROPIC_API_KEY OPENAI_API_KEY AZURE_OPENAI_API_KEY
                   GOOGLE_API_KEY CF_AIG_TOKEN COMPAT_API_KEY GITHUB_TOKEN)};
    if ($self->{egress}) {
        $self->_egress_side(%o);
    } else {
        $ENV{SMCP_EGRESS} = 'off';
    }
    delete $ENV{ANTHROPIC_API_KEY} if defined $o{key} && !$o{key};
    delete @ENV{qw(GITHUB_TOKEN GITHUB_URL GITHUB_API_URL)}
        if defined $o{github} && !$o{github};
    for my $k (keys %{ $o{env} || {} }) {
        defined $o{env}{$k} ? ($ENV{$k} = $o{env}{$k}) : delete $ENV{$k};
    }
    # its own environment, for the `make down` at the end (another new()
    # since has changed the process's)
    $self->{env} = { %ENV };
    push @LIVE, $self;
    return $self;
}

# a checkout of its own: the sources by symlinks, build/ a copy
sub _checkout {
    my ($self) = @_;
    my $root = repo_root();
    my $top = $self->{top} = tempdir('smcp-checkout-XXXXXX', TMPDIR => 1,
                                     CLEANUP => !$ENV{SMCP_TEST_KEEP});
    chmod 0711, $top;
    for my $f (qw(.ci Makefile config config.make runner ngx_sandbox_mcp_module)) {
        symlink("$root/$f", "$top/$f") or die "symlink $f: $!";
    }
    $self->build;
}

# build(): the tree's module, smcp-token and smcp-runner copied into the
# checkout's build/, each a new file moved into place (as make all and the
# module's rule write them: a running process keeps the file it has)
sub build {
    my ($self) = @_;
    my $root = repo_root();
    mkdir "$self->{top}/build";
    for my $f (qw(ngx_http_sandbox_mcp_module.so smcp-token smcp-runner)) {
        my $to = "$self->{top}/build/$f";
        system('cp', '-p', "$root/build/$f", "$to.tmp") == 0
            && rename("$to.tmp", $to) or die "copying build/$f: $!";
    }
}

# make(@args) -> (exit code, stdout and stderr): make in the stack's
# checkout
sub make {
    my ($self, @args) = @_;
    my ($rc, $out, $err) = SMCP::Test::run_cmd(['make', '-s', '-C', $self->{top}, @args],
                                               timeout => 600);
    return ($rc, $out . $err);
}

sub _nginx_wrapper {
    my ($self) = @_;
    my $envdir = $self->{envdir} = tempdir('smcp-stack-env-XXXXXX', TMPDIR => 1,
                                           CLEANUP => 1);
    spew("$envdir/nginx", <<"SH");
#!/bin/sh
conf=x
prev=
for a in "\$@"; do [ "\$prev" = -c ] && conf=\$(basename "\$a"); prev=\$a; done
case " \$* " in *" -t "*|*" -s "*) ;; *) env > "$envdir/\$conf.env" ;; esac
exec /usr/sbin/nginx "\$@"
SH
    chmod 0755, "$envdir/nginx";
    $ENV{SMCP_NGINX} = "$envdir/nginx";
}

# the egress side of `make up`: its own sandbox network, a fake model, a
# fake GitHub (and the registries' stand-ins)
sub _egress_side {
    my ($self, %o) = @_;
    $self->{eport} = free_port();
    $self->{net} = 'smcp-' . test_id();
    $self->{fake} = SMCP::Fakes::start_anthropic(key => $KEY,
        text => $o{text} // 'stack run done',
        ($o{scripts} ? (script => [SMCP::Fakes::scenario_script($o{scripts})])
         : $o{script} ? (script => $o{script}) : ()));
    $ENV{SMCP_EGRESS} = 'on';
    $ENV{SMCP_SANDBOX_NET} = $self->{net};
    $ENV{SMCP_SANDBOX_BRIDGE} = bridge_name();
    $ENV{SMCP_SANDBOX_SUBNET} = free_subnet();
    $ENV{SMCP_EGRESS_PORT} = $self->{eport};
    $ENV{ANTHROPIC_API_KEY} = $KEY;
    $ENV{ANTHROPIC_BASE_URL} = $self->{fake}->url;
    $self->{gh} = SMCP::Fakes::start_github(token => $GH_TOKEN);
    $self->{gh}->create_repo('owner/repo', files => { 'README.md' => "stack\n" });
    $ENV{GITHUB_TOKEN} = $GH_TOKEN;
    $ENV{GITHUB_URL} = $self->{gh}->url;
    $ENV{GITHUB_API_URL} = $self->{gh}->url;
    $ENV{SMCP_RUNNER_NAME} = 'stack-' . test_id();
    $ENV{SMCP_BACKEND} = $o{backend} // 'docker';
    $self->_registries if $o{registries};
}

# package registries: npm and pypi enabled, in front of stand-ins on
# loopback
sub _registries {
    my ($self) = @_;
    my $reg = tempdir('smcp-stack-reg-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $npm = $self->{npm} = SMCP::Fakes::start_static(root => "$reg/npm", kind => 'npm');
    my $pypi = $self->{pypi} = SMCP::Fakes::start_static(root => "$reg/pypi", kind => 'pypi');
    my $files = $self->{pyfiles} = SMCP::Fakes::start_static(root => "$reg/files",
                                                             kind => 'files');
    $ENV{SMCP_REGISTRIES} = 'npm,pypi';
    $ENV{NPM_REGISTRY_URL} = $npm->url;
    $ENV{PYPI_INDEX_URL} = $pypi->url . '/simple';
    $ENV{PYPI_FILES_URL} = $files->url;
    spew("$reg/npm/smcp-pad/index.json", json_encode({
        name => 'smcp-pad', 'dist-tags' => { latest => '1.0.0' },
        versions => { '1.0.0' => { name => 'smcp-pad', version => '1.0.0',
            dist => { tarball => $npm->url . '/smcp-pad/-/smcp-pad-1.0.0.tgz' } } } }));
    spew("$reg/files/packages/ab/smcp_demo-1.0-py3-none-any.whl", 'PK wheel');
    spew("$reg/pypi/simple/smcp-demo/index.html",
         '<a href="' . $files->url . '/packages/ab/smcp_demo-1.0-py3-none-any.whl">w</a>');
}

# .ci/stack up|down: (exit code, output)
sub stack {
    my ($self, $verb) = @_;
    my $out = `$self->{top}/.ci/stack $verb 2>&1`;
    my $rc = $? >> 8;
    $self->{up} = 1 if $verb eq 'up';
    $self->{up} = 0 if $verb eq 'down' && $rc == 0;
    return ($rc, $out);
}

sub up   { return $_[0]->stack('up') }
# down: what make down does; the sessions' volumes noted first (a session
# that took a pooled sandbox keeps its volume, smcp-pool-<hex>: its name
# is in Redis, which make down stops)
sub down {
    my ($self) = @_;
    $self->note_volumes;
    return $self->stack('down');
}

sub note_volumes {
    my ($self) = @_;
    my @ses = sort keys %{ $self->{sessions} || {} };
    return unless @ses && $self->{up} && -e "$self->{state}/redis-password";
    my $t = eval { $self->t } or return;
    my $prefix = ($self->{env} || {})->{SMCP_REDIS_PREFIX} // 'smcp:';
    for my $s (@ses) {
        my $v = eval { $t->redis('HGET', "${prefix}session:$s", 'volume') };
        $self->{volumes}{$v} = 1 if defined $v && $v =~ /^smcp-[A-Za-z0-9_-]+$/;
    }
}

# t(): SMCP::Test's client half for this stack: its MCP port, its Redis
# with make up's password ($up->t->run_events($id), ->run_hash($id))
sub t {
    my ($self) = @_;
    my $pw = SMCP::Test::slurp("$self->{state}/redis-password");
    chomp $pw;
    return SMCP::Test->client(port => $self->{port}, redis_port => $self->{rport},
                              redis_password => $pw);
}

# url(): the MCP URL make up serves
sub url { return "http://127.0.0.1:$_[0]{port}/mcp" }

# post($token, $body, header => value...): an HTTP::Tiny answer from /mcp
# (40 s: a get_result's waitSeconds of up to 30 fits)
sub post {
    my ($self, $tok, $body, %h) = @_;
    return HTTP::Tiny->new(timeout => 40)->post($self->url, {
        headers => {
            'Authorization' => "Bearer $tok",
            'Accept' => 'application/json, text/event-stream',
            'Content-Type' => 'application/json',
            %h,
        },
        content => $body,
    });
}

# initialize($token) -> the MCP session id ('' when refused)
sub initialize {
    my ($self, $tok) = @_;
    my $r = $self->post($tok, json_encode({ jsonrpc => '2.0', id => 1,
        method => 'initialize', params => { protocolVersion => '2025-11-25',
            capabilities => {}, clientInfo => { name => 'SMCP::MakeUp', version => '1' } } }));
    return $r->{status} == 200 ? ($r->{headers}{'mcp-session-id'} // '') : '';
}

# call($token, $sid, $tool, \%args) -> its structuredContent ({} if none);
# the sessions of the runs it starts (each attempt's) are remembered
# (their volumes go at END)
sub call {
    my ($self, $tok, $sid, $name, $args) = @_;
    my $r = $self->post($tok, json_encode({ jsonrpc => '2.0', id => 2,
        method => 'tools/call', params => { name => $name, arguments => $args } }),
        'Mcp-Session-Id' => $sid);
    my $j = json_decode($r->{content} // '') // {};
    my $sc = $j->{result}{structuredContent} // {};
    if ($name eq 'opencode_run_task') {
        # attempts: a session each
        for my $ses ($sc->{sessionId}, map { $_->{sessionId} } @{ $sc->{attempts} || [] }) {
            $self->{sessions}{$ses} = 1 if ($ses // '') =~ /^ses_[0-9a-f]{24}$/;
        }
    }
    return $sc;
}

# runners_ok($seconds) -> (whether /healthz said "runners":"ok" within
# $seconds, its last body)
sub runners_ok {
    my ($self, $secs) = @_;
    my $hz;
    my $ok = wait_until($secs, sub {
        $hz = SMCP::Test->client(port => $self->{port})->http(method => 'GET',
                                                             path => '/healthz');
        return ($hz->{body} // '') =~ /"runners":"ok"/;
    }, 0.5);
    return ($ok, $hz->{body});
}

# ui_open($link) -> (its answer, the smcp_ui cookie it set, '' if none):
# a dashboard link (make up's Dashboard:, make token UI=1's), not followed;
# undef: /ui/ without a token
sub ui_open {
    my ($self, $link) = @_;
    my $r = HTTP::Tiny->new(timeout => 10, max_redirect => 0)
        ->get($link // "http://127.0.0.1:$self->{port}/ui/");
    my ($c) = ($r->{headers}{'set-cookie'} // '') =~ /^(smcp_ui=[^;]+)/;
    return ($r, $c // '');
}

# ui_get($cookie, $path) -> an HTTP::Tiny answer from the dashboard with
# that cookie
sub ui_get {
    my ($self, $cookie, $path) = @_;
    return HTTP::Tiny->new(timeout => 10, max_redirect => 0)
        ->get("http://127.0.0.1:$self->{port}$path", { headers => { Cookie => $cookie } });
}

# wait_done($token, $sid, $runId, $seconds) -> get_result's last answer
# (at least 300 s: a run that takes the warm pool's sandbox while its
# OpenCode still warms waits for the warm-up, up to 30 s, before it starts
# cold; under make test's load both took minutes)
sub wait_done {
    my ($self, $tok, $sid, $id, $secs) = @_;
    my $res = {};
    $secs = 300 if $secs < 300;
    my $until = time() + $secs;
    while (time() < $until) {
        $res = $self->call($tok, $sid, 'opencode_get_result',
                           { runId => $id, waitSeconds => 20 });
        last if ($res->{status} // '') =~ /^(completed|failed|cancelled)$/;
    }
    return $res;
}

sub stop_fakes {
    my ($self) = @_;
    $_->stop for grep { $_ } @{$self}{qw(fake gh npm pypi pyfiles)};
}

# a stack left up by a failed test: down, so that nothing outlives it
END {
    for my $self (@LIVE) {
        next if $self->{owner} != $$;
        next if $ENV{SMCP_TEST_KEEP};
        if ($self->{up}) {
            local %ENV = %{ $self->{env} };
            $self->down;
        }
        $self->stop_fakes;
        # the sandboxes of its runner (make down leaves a running one to a
        # restarted runner, as it should; a pooled one carries no run label)
        if (my $rn = ($self->{env} || {})->{SMCP_RUNNER_NAME}) {
            my @ids = split ' ', `docker ps -aq --filter label=smcp.runner=$rn 2>/dev/null`;
            system("docker rm -f -v @ids >/dev/null 2>&1") if @ids;
        }
        # the sessions' volumes (make down leaves them, as it should)
        my @vols = ((map { "smcp-$_" } sort keys %{ $self->{sessions} || {} }),
                    sort keys %{ $self->{volumes} || {} });
        system("docker volume rm -f @vols >/dev/null 2>&1") if @vols;
        # its pooled sandboxes' volumes (labelled smcp.pool=<its name>):
        # one no session names would have leaked (make down drains the
        # pool), and is said
        if (my $rn = ($self->{env} || {})->{SMCP_RUNNER_NAME}) {
            my %ses = map { ($_ => 1) } @vols;
            for my $v (split ' ', `docker volume ls -q --filter label=smcp.pool=$rn 2>/dev/null`) {
                Test::More::diag("pool volume $v of runner $rn: no session led to it "
                                 . '(it would have leaked)') unless $ses{$v};
                system("docker volume rm -f $v >/dev/null 2>&1");
            }
        }
    }
}

1;
