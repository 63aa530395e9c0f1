#!/usr/bin/env perl
# The whole chain, for real: a REAL OpenCode (the pinned binary in the
# sandbox image) in a REAL locked-down sandbox container on a sandbox
# network (runner/sandbox-net), talking only to the REAL egress proxy (nginx
# with the module, routes from ngx_sandbox_mcp_module/conf/egress-routes.sh),
# which swaps the run token for the real key on the way to a scripted fake
# Anthropic API (and a fake GitHub for the clone).
#
#   1. no repository: the model has the agent write two files, run a shell
#      command and answer; the events (tool_use write, write, bash with the
#      command's output, text, step_finish with tokens and cost), the diff
#      line, the requests OpenCode sent, the keys each side saw
#   2. a repository cloned through the /github/ route: read, edit, commit
#      with the bash tool, answer; the diff covers the committed change
#   3. a run that is no longer live: the proxy answers 401 and OpenCode
#      ends at once with an `error` event and exit 1
#
# The fake answers by conversation state (turn = number of assistant
# messages so far), so an extra request (OpenCode's title generation, which
# the entry script avoids with --title) cannot shift the script; the test
# checks that none was made.  Timings and the event shapes are printed
# (diag) for the record.
#
# Needs root, Docker, the module built and redis-server; the sandbox image
# is built on first use (runner/sandbox/build-image).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use MIME::Base64 qw(encode_base64);
use POSIX qw(strftime);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(:all);
use SMCP::Events qw(kinds);
use SMCP::Fakes;
use SMCP::Test qw(json_decode json_encode wait_until rhex iso2epoch egress_server_conf);

ensure_docker(root => 1);

my ($image, $build_secs) = ensure_sandbox_image();
diag(sprintf('build-image: %.2f s', $build_secs));

my $t = SMCP::Test->new(workers => 2);
my $JSON = JSON::PP->new->canonical->allow_nonref;

my %real = (
    ANTHROPIC_API_KEY => 'sk-ant-api03-REAL-' . rhex() . '-' . rhex(),
    GITHUB_TOKEN      => 'ghp_REAL' . rhex(),
);

##############################################################################
# the fake model: one script per scenario, chosen by a marker in the task,
# the step by the number of assistant messages since

my $hello = "hello from the sandbox\n";
my $test_sh = <<'SH';
#!/bin/sh
echo "TEST-OUTPUT: $(cat hello.txt)"
echo "uid=$(id -u) cwd=$(pwd)"
env > /workspace/.oc/env-dump.txt
cat /proc/self/mounts > /workspace/.oc/mounts.txt
SH
my $reply1 = 'Both files are written and test.sh printed the greeting.';
my $reply2 = 'README.md now says it was edited; committed.';
my $reply3 = 'Continuing the same session: the files are still there.';

my %SCRIPTS = (
    'SCENARIO-WRITE' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/hello.txt', content => $hello } } },
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/test.sh', content => $test_sh } } },
        { tool_use => { name => 'bash', input => {
            command => 'sh test.sh', description => 'Run the test script' } } },
        { text => $reply1 },
    ],
    'SCENARIO-CLONE' => [
        { tool_use => { name => 'read', input => { filePath => '/workspace/repo/README.md' } } },
        { tool_use => { name => 'edit', input => {
            filePath => '/workspace/repo/README.md', oldString => '# Demo',
            newString => "# Demo\n\nEdited by the agent." } } },
        { tool_use => { name => 'bash', input => {
            command => 'git add -A && git commit -qm "agent: edit README" && git log --oneline',
            description => 'Commit the change' } } },
        { text => $reply2 },
    ],
    'SCENARIO-CONTINUE' => [ { text => $reply3 } ],
    'SCENARIO-STOP' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/partial.txt', content => "partial work\n" } } },
        { hang => 30 },
    ],
);

my $anthropic = SMCP::Fakes::start_anthropic(key => $real{ANTHROPIC_API_KEY},
    script => [SMCP::Fakes::scenario_script(\%SCRIPTS, title => 'Sandbox test run')],
    deltas => 3);
my $github = SMCP::Fakes::start_github(token => $real{GITHUB_TOKEN});
$github->create_repo('owner/repo', files => { 'README.md' => "# Demo\n\nA repository.\n" });

##############################################################################
# the sandbox network and the egress proxy on its gateway

my $eport = $t->free_port;
my $net = sandbox_net_up(egress_port => $eport);
my $gw = $net->{gateway};
my $egress_url = "http://$gw:$eport";
note("sandbox network $net->{name} ($net->{subnet}), egress $egress_url");

local @ENV{keys %real} = values %real;
local $ENV{ANTHROPIC_BASE_URL} = $anthropic->url;
local $ENV{GITHUB_URL} = $github->url;
local $ENV{GITHUB_API_URL} = $github->url;
ok(eval { $t->render_routes }, 'egress-routes.sh renders the routes') or diag($@);

$t->start(http => egress_server_conf("$gw:$eport"));

##############################################################################
# helpers


# volumes: SMCP::Docker::create_volume (labelled, removed at the end)
sub new_volume {
    my (%labels) = @_;
    return create_volume(labels => \%labels);
}

# run one sandbox to its end: (exit code, stdout lines, info)
sub run_sandbox {
    my (%o) = @_;
    my $vol = $o{volume} // new_volume('smcp.run' => $o{run}, 'smcp.session' => "ses_$o{run}");
    my %env = (
        HOME            => '/home/sandbox',
        SMCP_EGRESS_URL => $egress_url,
        SMCP_RUN_TOKEN  => $o{token},
        SMCP_MODEL      => 'anthropic/claude-sonnet-4-5',
        SMCP_TASK       => $o{task},
        %{ $o{env} || {} },
    );
    my $cid = create_container(
        sandbox     => 1,
        image       => $image,
        network     => $net->{name},
        dns         => [$gw],
        dns_options => ['timeout:1', 'attempts:1'],
        init        => 1,
        memory      => '1g',
        pids_limit  => 512,
        cpus        => '1',
        tmpfs       => {
            '/tmp'          => 'rw,nosuid,nodev,size=512m,mode=1777',
            '/home/sandbox' => 'rw,nosuid,nodev,size=64m,uid=1000,gid=1000,mode=0700',
        },
        labels      => { 'smcp.run' => $o{run} },
        env         => \%env,
        extra       => ['--mount', "type=volume,src=$vol,dst=/workspace",
                        '--log-driver', 'json-file', '--log-opt', 'max-size=20m',
                        '--log-opt', 'max-file=2'],
    );
    my $t0 = time();
    start_container($cid);
    my ($rc, $out, $err) = docker({ timeout => 300 }, 'wait', $cid);
    my $wall = time() - $t0;
    chomp $out;
    my $exit = $rc == 0 ? $out : "wait failed: $err";
    my (undef, $logs, $stderr) = docker('logs', $cid);
    my $started = iso2epoch(container_inspect_field($cid, '{{.State.StartedAt}}'));
    my $finished = iso2epoch(container_inspect_field($cid, '{{.State.FinishedAt}}'));
    my @ev;
    for my $l (split /\n/, $logs) {
        my $j = eval { JSON::PP->new->utf8->decode($l) };
        push @ev, $j // { type => '(not json)', line => $l };
    }
    return ($exit, \@ev, {
        cid => $cid, volume => $vol, logs => $logs, stderr => $stderr, wall => $wall,
        started => $started, finished => $finished,
        run_s => (defined $started && defined $finished) ? $finished - $started : undef,
    });
}

# the volume's contents as a tar stream (from the exited container)
sub volume_tar {
    my ($cid) = @_;
    my ($rc, $out, $err) = docker({ timeout => 120 }, 'cp', "$cid:/workspace", '-');
    return $rc == 0 ? $out : undef;
}

# a JSON value's shape: strings shortened, arrays to their first element
sub shape {
    my ($v, $depth) = @_;
    $depth //= 0;
    if (ref $v eq 'HASH') {
        return { map { ($_ => shape($v->{$_}, $depth + 1)) } keys %$v };
    } elsif (ref $v eq 'ARRAY') {
        return @$v ? [shape($v->[0], $depth + 1), (@$v > 1 ? '...' : ())] : [];
    } elsif (JSON::PP::is_bool($v)) {
        return $v;
    } elsif (defined $v && !ref $v) {
        return length($v) > 40 ? substr($v, 0, 37) . '...' : $v;
    }
    return $v;
}

my %shapes;
sub record_shapes {
    my (@ev) = @_;
    for my $e (@ev) {
        my $k = $e->{type} eq 'smcp' ? "smcp:$e->{step}" : $e->{type};
        $k .= ":$e->{part}{tool}" if $k eq 'tool_use';
        $shapes{$k} //= shape($e);
    }
}

my @timings;

##############################################################################
# 1. no repository: write, write, bash, answer

my ($run1, $tok1) = $t->live_run();
my $task1 = "SCENARIO-WRITE: write hello.txt and test.sh, run test.sh, report.";
my ($exit1, $ev1, $i1) = run_sandbox(run => $run1, token => $tok1, task => $task1);
push @timings, ['no repository (write, write, bash, text)', $i1];
is($exit1, 0, 'run 1: the container exits 0')
    or diag("logs:\n$i1->{logs}\nstderr:\n$i1->{stderr}");
record_shapes(@$ev1);

{
    my @ev = @$ev1;
    ok(!grep({ $_->{type} eq '(not json)' } @ev), 'run 1: every stdout line is JSON')
        or diag(join "\n", map { $_->{line} } grep { $_->{type} eq '(not json)' } @ev);
    my @k = grep { !/^(step_start|step_finish|reasoning)$/ } kinds(@ev);
    is_deeply(\@k, ['smcp:agent_start', 'tool_use:write', 'tool_use:write', 'tool_use:bash',
                    'text', 'smcp:agent_exit', 'smcp:diff'],
              'run 1: agent_start, write, write, bash, text, agent_exit, diff (in order)')
        or diag(join ' ', kinds(@ev));

    my @tu = grep { $_->{type} eq 'tool_use' } @ev;
    is($tu[0]{part}{state}{status}, 'completed', 'write 1: completed');
    is($tu[0]{part}{state}{input}{filePath}, '/workspace/repo/hello.txt', 'write 1: filePath');
    is($tu[1]{part}{state}{input}{filePath}, '/workspace/repo/test.sh', 'write 2: filePath');
    is($tu[2]{part}{state}{status}, 'completed', 'bash: completed');
    is($tu[2]{part}{state}{input}{command}, 'sh test.sh', 'bash: the command');
    like($tu[2]{part}{state}{output} // '', qr/^TEST-OUTPUT: hello from the sandbox\n/,
         'bash: the output of the command (it read the file the agent wrote)');
    like($tu[2]{part}{state}{output} // '', qr{uid=1000 cwd=/workspace/repo},
         'bash: ran as uid 1000 in the worktree');
    is($tu[2]{part}{state}{metadata}{exit}, 0, 'bash: metadata.exit 0');

    my ($text) = grep { $_->{type} eq 'text' } @ev;
    is($text->{part}{text}, $reply1, 'text: the scripted reply');

    my @sf = grep { $_->{type} eq 'step_finish' } @ev;
    is_deeply([map { $_->{part}{reason} } @sf], ['tool-calls', 'tool-calls', 'tool-calls', 'stop'],
              'step_finish: tool-calls x3, then stop');
    ok(!grep({ !($_->{part}{tokens}{input} > 0 && $_->{part}{tokens}{output} > 0
                 && defined $_->{part}{tokens}{cache}{read}) } @sf),
       'step_finish: tokens (input, output, cache) on every step');
    ok(!grep({ !(defined $_->{part}{cost} && $_->{part}{cost} > 0) } @sf),
       'step_finish: a cost on every step');
    my %sess = map { ($_->{sessionID} // '') => 1 } grep { $_->{type} ne 'smcp' } @ev;
    is(scalar(keys %sess), 1, 'one sessionID on every OpenCode event');
    like((keys %sess)[0], qr/^ses_/, 'sessionID ses_...');

    my ($ae) = grep { ($_->{step} // '') eq 'agent_exit' } @ev;
    is($ae->{exitCode}, 0, 'agent_exit: exitCode 0');
    my $diff = $ev[-1]{diff} // '';
    like($diff, qr{^diff --git a/hello\.txt b/hello\.txt\nnew file mode 100644\n.*^\+hello from the sandbox$}ms,
         'diff: hello.txt');
    like($diff, qr{^diff --git a/test\.sh b/test\.sh\n.*^\+echo "TEST-OUTPUT: \$\(cat hello\.txt\)"$}ms,
         'diff: test.sh');
    is_deeply([$diff =~ /^diff --git a\/(\S+) /mg], ['hello.txt', 'test.sh'],
              'diff: those two files, nothing of OpenCode\'s state');
    # it applies (complete, final newline kept)
    my $dir = $t->dir . '/apply';
    mkdir $dir;
    open(my $dh, '>', "$dir/run.diff") or die $!;
    print $dh $diff;
    close $dh;
    my $out = `cd $dir && git init -q . && git apply run.diff 2>&1 && cat hello.txt`;
    is($out, $hello, 'diff: git apply recreates the files');
}

# what OpenCode sent
my @req1 = grep { ($_->{body} // '') =~ /SCENARIO-WRITE/ } $anthropic->requests;
{
    my @all = $anthropic->requests;
    diag('OpenCode requests (run 1):');
    for my $r (@req1) {
        my $j = $r->{json} || {};
        diag(sprintf('  %s %s model=%s stream=%s max_tokens=%s tools=%d messages=%d status=%s',
                     $r->{method}, $r->{path}, $j->{model} // '-', $j->{stream} ? 'true' : 'false',
                     $j->{max_tokens} // '-', scalar(@{ $j->{tools} || [] }),
                     scalar(@{ $j->{messages} || [] }), $r->{status}));
    }
    diag('  header names: ' . join(' ', map { $_->[0] } @{ $req1[-1]{header_list} || [] })) if @req1;
    diag('  ' . join(', ', map { "$_: " . ($req1[-1]{headers}{$_} // '-') }
                         qw(anthropic-version anthropic-beta user-agent x-session-id))) if @req1;
    diag('  tools offered: ' . join(' ', sort map { $_->{name} } @{ $req1[-1]{json}{tools} || [] }))
        if @req1;
    is(scalar(@req1), 4, 'run 1: four model requests (one per step)');
    ok(!grep({ $_->{path} ne '/v1/messages' || $_->{method} ne 'POST' } @req1),
       'all POST /v1/messages');
    ok(!grep({ ($_->{json}{model} // '') ne 'claude-sonnet-4-5' } @req1), 'model claude-sonnet-4-5');
    ok(!grep({ !$_->{json}{stream} } @req1), 'all streaming');
    my @title = grep { $JSON->encode($_->{json}{system} // '') =~ /title generator/i } @all;
    is(scalar(@title), 0, 'no title-generation request (the entry script passes --title)');
    ok(!grep({ ($_->{headers}{'x-api-key'} // '') ne $real{ANTHROPIC_API_KEY} } @req1),
       'the fake saw the real key on every request');
    ok(!grep({ my $r = $_; grep({ index($_->[1], $tok1) >= 0 } @{ $r->{header_list} }) } @req1),
       'the fake never saw the run token in a header');
    ok(!grep({ index($_->{body} // '', $tok1) >= 0 } @req1), '... nor in a body');
    ok(!grep({ defined $_->{headers}{authorization} } @req1), 'no Authorization header upstream');
    my $first = $req1[0] && $req1[0]{time};
    push @timings, ['  container start -> first model request',
                    { secs => defined $first && $i1->{started} ? $first - $i1->{started} : undef }];
}

# the sandbox never saw the real key
{
    my $env = container_inspect_field($i1->{cid}, '{{json .Config.Env}}');
    unlike($env, qr/REAL/, 'container env: no real key');
    like($env, qr/\Q$tok1\E/, 'container env: the run token');
    my $tar = volume_tar($i1->{cid});
    ok(defined $tar && length $tar > 10000, 'the volume read back (docker cp)');
    unlike($tar // '', qr/\Q$real{ANTHROPIC_API_KEY}\E/, 'volume: no real key anywhere');
    unlike($tar // '', qr/\Q$real{GITHUB_TOKEN}\E/, 'volume: no GitHub token anywhere');
    my ($dump) = ($tar // '') =~ /(SMCP_RUN_TOKEN=[^\n]*)/;
    is($dump, "SMCP_RUN_TOKEN=$tok1", 'the env dump made inside the run has the run token');
    unlike($i1->{logs}, qr/REAL/, 'logs: no real key');
    my ($mounts) = ($tar // '') =~ /(^\S+ \/tmp tmpfs [^\n]*)/m;
    note("inside the run: $mounts") if $mounts;
    my @eg = $t->run_events($run1, type => 'egress');
    is(scalar(grep { $_->{json}{route} eq 'anthropic' && $_->{json}{status} == 200 } @eg), 4,
       'audit: four anthropic egress events, status 200');
    unlike(join("\n", map { $_->{data} } @eg), qr/REAL|\Q$tok1\E/, 'audit: no key, no token');
}

##############################################################################
# 1b. the same session continued on the same volume (a new run, a new token)

my ($session1) = map { $_->{sessionID} } grep { $_->{type} eq 'text' } @$ev1;
{
    my ($run, $tok) = $t->live_run();
    my ($exit, $ev, $i) = run_sandbox(run => $run, token => $tok, volume => $i1->{volume},
        task => 'SCENARIO-CONTINUE: are the files still there?',
        env => { SMCP_SESSION => $session1 });
    push @timings, ['same session continued (one text turn)', $i];
    is($exit, 0, 'continued session: exit 0') or diag($i->{logs});
    my @k = grep { !/^(step_start|step_finish|reasoning)$/ } kinds(@$ev);
    is_deeply(\@k, ['smcp:agent_start', 'text', 'smcp:agent_exit', 'smcp:diff'],
              'continued session: one text answer') or diag(join ' ', kinds(@$ev));
    my ($text) = grep { $_->{type} eq 'text' } @$ev;
    is($text && $text->{sessionID}, $session1, 'continued session: the same sessionID');
    is($text && $text->{part}{text}, $reply3, 'continued session: the scripted reply');
    my ($r) = grep { ($_->{body} // '') =~ /SCENARIO-CONTINUE/ } $anthropic->requests;
    my @m = @{ ($r && $r->{json}{messages}) || [] };
    is(scalar(@m), 9, 'continued session: the model got the whole conversation (8 + 1 messages)');
    like($JSON->encode(\@m), qr/TEST-OUTPUT: hello from the sandbox/,
         'continued session: including the earlier tool output');
    is($r && $r->{headers}{'x-api-key'}, $real{ANTHROPIC_API_KEY}, 'continued session: real key upstream');
    # no commit yet in the repository: the diff still shows the earlier
    # run's (uncommitted) files
    like($ev->[-1]{diff} // '', qr{^diff --git a/hello\.txt}m,
         'continued session: the uncommitted work of the session is in the diff');
}

##############################################################################
# 2. a repository cloned through the proxy: read, edit, commit, answer

my ($run2, $tok2) = $t->live_run(repository => 'https://github.com/owner/repo');
my $start_sha = $github->ref_commit('owner/repo', 'main');
my ($exit2, $ev2, $i2) = run_sandbox(run => $run2, token => $tok2,
    task => 'SCENARIO-CLONE: note in README.md that the agent edited it; commit.',
    env => { SMCP_REPOSITORY => 'https://github.com/owner/repo' });
push @timings, ['clone, read, edit, bash (commit), text', $i2];
is($exit2, 0, 'run 2: the container exits 0')
    or diag("logs:\n$i2->{logs}\nstderr:\n$i2->{stderr}");
record_shapes(@$ev2);
{
    my @ev = @$ev2;
    my @k = grep { !/^(step_start|step_finish|reasoning)$/ } kinds(@ev);
    is_deeply(\@k, ['smcp:clone', 'smcp:agent_start', 'tool_use:read', 'tool_use:edit',
                    'tool_use:bash', 'text', 'smcp:agent_exit', 'smcp:diff'],
              'run 2: clone, agent_start, read, edit, bash, text, agent_exit, diff')
        or diag(join ' ', kinds(@ev));
    is($ev[0]{repository}, 'https://github.com/owner/repo', 'clone: the repository');
    my @tu = grep { $_->{type} eq 'tool_use' } @ev;
    is_deeply([map { $_->{part}{state}{status} } @tu], [('completed') x 3],
              'read, edit, bash: completed') or diag(json_encode([map { $_->{part}{state} } @tu]));
    like($tu[0]{part}{state}{output} // '', qr/# Demo/, 'read: the cloned file');
    like($tu[2]{part}{state}{output} // '', qr/agent: edit README/, 'bash: the commit was made');
    my ($text) = grep { $_->{type} eq 'text' } @ev;
    is($text->{part}{text}, $reply2, 'text: the scripted reply');
    my $diff = $ev[-1]{diff} // '';
    like($diff, qr{\Adiff --git a/README\.md b/README\.md\n.*^ # Demo\n \n\+Edited by the agent\.\n\+\n A repository\.\n\z}ms,
         'diff: the committed README change (against the cloned commit)')
        or diag($diff);

    my @g = $github->requests;
    ok(scalar(grep { $_->{path} =~ m{^/owner/repo(\.git)?/info/refs$} } @g), 'github: info/refs');
    ok(scalar(grep { $_->{path} =~ m{/git-upload-pack$} } @g), 'github: git-upload-pack');
    ok(!grep({ ($_->{auth} // '') ne 'ok' } @g), 'github: the real token on every request');
    ok(!grep({ my $r = $_; grep({ index($_->[1], $tok2) >= 0
        || index($_->[1], encode_base64("x-access-token:$tok2", '')) >= 0 } @{ $r->{header_list} }) } @g),
       'github: never the run token');
    is($github->ref_commit('owner/repo', 'main'), $start_sha, 'github: nothing pushed');
    my $tar = volume_tar($i2->{cid});
    unlike($tar // '', qr/\Q$real{GITHUB_TOKEN}\E|\Q$real{ANTHROPIC_API_KEY}\E/,
           'volume: no real credential');
    my @eg = $t->run_events($run2, type => 'egress');
    ok(scalar(grep { $_->{json}{route} eq 'github' && $_->{json}{status} == 200 } @eg) >= 2,
       'audit: github egress events');
}

##############################################################################
# 3. a run that is no longer live: 401 from the proxy, an error event

my ($run3, $tok3) = $t->live_run();
$t->redis('HSET', "smcp:run:$run3", status => 'cancelled');
my $before = scalar(my @x = $anthropic->requests);
my ($exit3, $ev3, $i3) = run_sandbox(run => $run3, token => $tok3,
    task => 'SCENARIO-WRITE: this run was cancelled before it started.');
push @timings, ['run not live (401 at once)', $i3];
record_shapes(@$ev3);
{
    is($exit3, 1, 'run 3: the container exits 1');
    my @ev = @$ev3;
    my ($err) = grep { $_->{type} eq 'error' } @ev;
    ok($err, 'run 3: an error event') or diag($i3->{logs});
    is($err && $err->{error}{data}{statusCode}, 401, 'error: statusCode 401');
    like($err && $err->{error}{data}{message} // '', qr/egress|run|token/i,
         'error: the proxy\'s message') or diag(json_encode($err));
    my ($ae) = grep { ($_->{step} // '') eq 'agent_exit' } @ev;
    is($ae && $ae->{exitCode}, 1, 'agent_exit: exitCode 1');
    is($ev[-1]{step}, 'diff', 'the diff line still comes last');
    is(scalar(my @y = $anthropic->requests), $before, 'the fake saw no request');
    my @eg = $t->run_events($run3, type => 'egress');
    ok(scalar(grep { !$_->{json}{granted} && $_->{json}{status} == 401 } @eg),
       'audit: the refused request');
}

##############################################################################
# 4. stopped mid-run (the runner's cancel): the model hangs, `docker stop`;
# OpenCode gets SIGTERM from the entry script, which still reports

{
    my ($run, $tok) = $t->live_run();
    my $vol = new_volume('smcp.run' => $run);
    my $cid = create_container(
        sandbox => 1, image => $image, network => $net->{name}, dns => [$gw],
        dns_options => ['timeout:1', 'attempts:1'], init => 1, memory => '1g',
        pids_limit => 512,
        tmpfs => { '/tmp' => 'rw,nosuid,nodev,size=512m,mode=1777',
                   '/home/sandbox' => 'rw,nosuid,nodev,size=64m,uid=1000,gid=1000,mode=0700' },
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress_url,
                 SMCP_RUN_TOKEN => $tok, SMCP_TASK => 'SCENARIO-STOP: write, then wait.' },
        extra => ['--mount', "type=volume,src=$vol,dst=/workspace"]);
    start_container($cid);
    my $hung = wait_until(180, sub {
        scalar(grep { ($_->{body} // '') =~ /SCENARIO-STOP/ && !$_->{status} } $anthropic->requests) });
    ok($hung, 'stop: the second model request is hanging');
    my $t0 = time();
    my ($rc, undef, $err) = docker({ timeout => 120 }, 'stop', '-t', '60', $cid);
    my $dt = time() - $t0;
    is($rc, 0, 'stop: docker stop') or diag($err);
    # on the SIGTERM (exit 143 below), not the KILL after docker stop's 60 s
    ok($dt < 30, sprintf('stop: the container stopped in %.2f s (no 60 s kill timeout)', $dt));
    push @timings, ['docker stop while the model hangs', { secs => $dt }];
    is(container_inspect_field($cid, '{{.State.ExitCode}}'), 143, 'stop: exit status 143');
    my (undef, $logs) = docker('logs', $cid);
    my @ev = map { eval { JSON::PP->new->utf8->decode($_) } // { type => '(not json)' } }
             split /\n/, $logs;
    record_shapes(@ev);
    my @k = grep { !/^(step_start|step_finish|reasoning)$/ } kinds(@ev);
    is_deeply(\@k, ['smcp:agent_start', 'tool_use:write', 'smcp:agent_exit', 'smcp:diff'],
              'stop: the write, then agent_exit and the diff') or diag($logs);
    my ($ae) = grep { ($_->{step} // '') eq 'agent_exit' } @ev;
    is($ae && $ae->{signal}, 'TERM', 'stop: agent_exit says TERM');
    is($ae && $ae->{exitCode}, 143, 'stop: agent_exit exitCode 143');
    like($ev[-1]{diff} // '', qr{^\+partial work$}m, 'stop: the diff has the partial work');
}

##############################################################################
# the record

for my $tm (@timings) {
    my ($what, $i) = @$tm;
    diag(sprintf('timing %-45s %s', $what,
        join(', ', (defined $i->{run_s} ? sprintf('container start->exit %.2f s', $i->{run_s}) : ()),
                   (defined $i->{wall} ? sprintf('docker start+wait %.2f s', $i->{wall}) : ()),
                   (defined $i->{secs} ? sprintf('%.2f s', $i->{secs}) : ()))));
}
for my $k (sort keys %shapes) {
    diag("event $k: " . $JSON->encode($shapes{$k}));
}

$_->stop for ($anthropic, $github);
$t->done;
