#!/usr/bin/env perl
# Sessions that keep going (issue 9), end to end: MCP through nginx,
# build/smcp-runner, dockerd, the sandbox image with the real OpenCode;
# the model and GitHub are the fakes of t/lib/SMCP/Fakes.pm.
#
#   1. A follow-up without `repository` works on the session's repository:
#      fetched (a commit pushed upstream meanwhile is seen), changed,
#      pushed, its pull request opened.
#   2. A follow-up with a new `branch` is on it (event branch, created
#      true); one naming a branch the remote has checks that out (created
#      false).
#   3. A follow-up naming a second repository: cloned beside the first
#      (/workspace/repo-<owner>-<name>), the agent works there, the first
#      is fetched (egress allows the session's repositories).
#   4. Expiry: an idle session (sandbox_mcp_session_idle 8s, the runner's
#      janitor every second) is expired, its volume removed (a fork's
#      copier a dead runner left on it removed first); a later
#      run_task with its sessionId is an isError saying so.
#   5. Another tenant's sessionId behaves as an unknown one.
#   6. A token granting less than the session holds (issue 22): its
#      follow-up is refused with a clear error, nothing runs, nothing is
#      pushed to the fake GitHub and no pull request is opened.
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;
use Time::HiRes qw(time);

use SMCP::Docker qw(docker);
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(wait_until);

my $IDLE = 8;

my $s = SMCP::Stack->new(
    location => "sandbox_mcp_session_idle ${IDLE}s;",
    scripts => {
        'SCENARIO-ONE'  => [ { tool_use => { name => 'write', input => {
                                 filePath => '/workspace/repo/one.txt', content => "one\n" } } },
                             { text => 'One written.' } ],
        'SCENARIO-TWO'  => [ bash_step('git log --oneline origin/main | grep -c "from upstream" '
                                       . '| sed "s/^/UPSTREAM: /"; ls', 'Look'),
                             { tool_use => { name => 'write', input => {
                                 filePath => '/workspace/repo/two.txt', content => "two\n" } } },
                             { text => 'Two written.' } ],
        'SCENARIO-BR'   => [ bash_step('echo "BRANCH: $(git rev-parse --abbrev-ref HEAD)"; '
                                       . 'ls', 'Where'),
                             { text => 'On it.' } ],
        'SCENARIO-LIB'  => [ bash_step('echo "PWD: $PWD"; ls -d /workspace/repo*; '
                                       . 'cat /workspace/repo/RELEASE.md', 'Where'),
                             { text => 'Beside.' } ],
        'SCENARIO-IDLE' => [ { text => 'Idle now.' } ],
        'SCENARIO-NARROW' => [ { tool_use => { name => 'write', input => {
                                   filePath => '/workspace/repo/narrow.txt',
                                   content => "narrow\n" } } },
                               { text => 'Narrow written.' } ],
    },
    repos => {
        'acme/app' => { 'README.md' => "# app\n" },
        'acme/lib' => { 'LIB.md' => "# lib\n" },
    },
);
my $t = $s->t;
my $gh = $s->github;
my $runner = $s->start_runner(concurrency => 2, args => ['--janitor-interval', '1']);
my $APP = 'https://github.com/acme/app';
my $LIB = 'https://github.com/acme/lib';

sub steps {
    my ($id, $name) = @_;
    return grep { ($_->{step} // '') eq $name }
           map { $_->{json} } grep { ref $_->{json} eq 'HASH' } $s->stored_events($id);
}

sub run_ok {
    my ($what, %args) = @_;
    my $run = $s->run_task(%args);
    my $r = $s->wait_done($run->{runId}, 300);
    is($r->{status}, 'completed', "$what: completed")
        or $s->diag_run($run->{runId}, $runner);
    return ($run, $r);
}

##############################################################################

my $t0 = time();
my ($one) = run_ok('the first run', task => 'SCENARIO-ONE: one', repository => $APP,
                   createPullRequest => JSON::PP::true);
my $ses = $one->{sessionId};
$gh->commit_files('acme/app', branch => 'main', files => { 'UP.md' => "up\n" },
                  message => 'from upstream');
$gh->commit_files('acme/app', branch => 'release', from => 'main',
                  files => { 'RELEASE.md' => "release\n" }, message => 'release');

subtest 'a follow-up without repository: fetched, changed, pushed' => sub {
    my ($two, $r) = run_ok('the follow-up', task => 'SCENARIO-TWO: two', sessionId => $ses,
                           createPullRequest => JSON::PP::true);
    my $id = $two->{runId};
    is($two->{sessionId}, $ses, 'the same session');
    is(scalar(steps($id, 'clone')), 0, 'no clone');
    is((steps($id, 'fetch'))[0]{repository}, $APP, 'the session\'s repository fetched');
    is(scalar(steps($id, 'fetch_failed')), 0, '... without failure');
    like($s->tool_output($id), qr/^UPSTREAM: 1$/m, 'the upstream commit is seen');
    like($s->tool_output($id), qr/^one\.txt$/m, 'the first run\'s file is there');
    is((steps($id, 'pushed'))[0]{branch}, "opencode/$id", 'pushed its branch');
    is($gh->file_content('acme/app', "opencode/$id", 'two.txt'), "two\n",
       'GitHub has the change on it');
    is($s->run_hash($id)->{pr_status}, 'opened', 'its pull request opened');
    like($r->{pullRequestUrl} // '', qr{^https://github\.com/acme/app/pull/\d+$},
         'pullRequestUrl');
    is($s->run_hash($id)->{repository}, $APP, 'the run\'s repository: the session\'s');
};

subtest 'a follow-up with a branch: checked out, created when missing' => sub {
    my ($br) = run_ok('a new branch', task => 'SCENARIO-BR: new', sessionId => $ses,
                      branch => 'feature-x');
    my ($ev) = steps($br->{runId}, 'branch');
    is_deeply($ev, { type => 'smcp', step => 'branch', name => 'feature-x',
                     created => JSON::PP::true }, 'event branch: created');
    like($s->tool_output($br->{runId}), qr/^BRANCH: feature-x$/m, 'the agent is on it');

    my ($rel) = run_ok('the remote\'s branch', task => 'SCENARIO-BR: release',
                       sessionId => $ses, branch => 'release');
    ($ev) = steps($rel->{runId}, 'branch');
    is_deeply($ev, { type => 'smcp', step => 'branch', name => 'release',
                     created => JSON::PP::false }, 'event branch: not created');
    my $out = $s->tool_output($rel->{runId});
    like($out, qr/^BRANCH: release$/m, 'the agent is on it');
    like($out, qr/^RELEASE\.md$/m, '... with the remote branch\'s files');
};

subtest 'a second repository: cloned beside the first' => sub {
    my ($lib) = run_ok('the second repository', task => 'SCENARIO-LIB: lib',
                       sessionId => $ses, repository => $LIB);
    my $id = $lib->{runId};
    is((steps($id, 'clone'))[0]{repository}, $LIB, 'cloned');
    is((steps($id, 'fetch'))[0]{repository}, $APP, 'the first fetched');
    is(scalar(steps($id, 'fetch_failed')), 0, '... through the egress proxy');
    my $out = $s->tool_output($id);
    like($out, qr{^PWD: /workspace/repo-acme-lib$}m, 'the agent works in the second');
    like($out, qr{^/workspace/repo$}m, 'the first where it was');
    like($out, qr{^release$}m, '... as the last run left it (on release)');
    my $h = $s->run_hash($id);
    is_deeply(SMCP::Test::json_decode($h->{repositories}), [$APP, $LIB],
              'the run\'s repositories: the session\'s');
};

$s->timing('a session of five runs', time() - $t0);

# right after the session's last run: it expires when idle $IDLE s
subtest 'a narrower token continuing the session: refused, nothing pushed' => sub {
    my @repos = qw(acme/app acme/lib);
    my %refs = map { $_ => $gh->refs($_) } @repos;
    my %pulls = map { $_ => scalar(@{ $gh->pulls($_) }) } @repos;
    my $runs = $t->redis('ZCARD', "smcp:session:$ses:runs");
    my $narrow = $t->token(repos => ['acme/lib']);
    my $sid = $t->initialize(token => $narrow);
    ok($sid, 'the narrow token has an MCP session');
    my $res = $t->call_tool($sid, 'opencode_run_task',
        { task => 'SCENARIO-NARROW: narrow', sessionId => $ses,
          createPullRequest => JSON::PP::true }, token => $narrow);
    ok($res->{isError}, 'a follow-up naming no repository (the session\'s first '
                        . 'is acme/app): isError');
    like(SMCP::Test::result_text($res),
         qr{^Session \Q$ses\E works on \Q$APP\E, which this token does not grant},
         '... saying which repository is not granted')
        or diag(SMCP::Test::result_text($res));
    if (my $id = (SMCP::Test::sc($res) // {})->{runId}) {
        # queued after all: let it end, so that what it pushed shows
        diag("BUG: run $id queued for a token that does not grant $APP");
        $s->wait_done($id, 300);
    }
    is($t->redis('ZCARD', "smcp:session:$ses:runs"), $runs, 'no run in the session');
    is_deeply({ map { $_ => $gh->refs($_) } @repos }, \%refs,
              'the fake GitHub\'s refs are as they were: nothing pushed');
    is_deeply({ map { $_ => scalar(@{ $gh->pulls($_) }) } @repos }, \%pulls,
              '... and no pull request opened');
};

subtest 'another tenant\'s sessionId: unknown' => sub {
    my $tok = $t->token(sub => 'mallory');
    my $sid = $t->initialize(token => $tok);
    ok($sid, 'mallory has an MCP session');
    my $res = $t->call_tool($sid, 'opencode_run_task',
        { task => 'SCENARIO-IDLE: steal', sessionId => $ses }, token => $tok);
    ok($res->{isError}, 'isError');
    like(SMCP::Test::result_text($res), qr/Unknown sessionId/, 'as an unknown session')
        or diag(SMCP::Test::result_text($res));
    my $unknown = $t->call_tool($sid, 'opencode_run_task',
        { task => 'x', sessionId => 'ses_' . ('0' x 24) }, token => $tok);
    (my $said = SMCP::Test::result_text($res)) =~ s/\Q$ses\E/ses_${\('0' x 24)}/g;
    is($said, SMCP::Test::result_text($unknown), '... word for word');
};

subtest 'an idle session expires: volume gone, its sessionId refused' => sub {
    my ($idle) = run_ok('a run', task => 'SCENARIO-IDLE: idle', repository => $APP);
    my $e = $idle->{sessionId};
    my $key = "smcp:session:$e";
    # a fork's copier a runner left when it died mid-copy (runner/fork.c):
    # it mounts the volume, and must not hold it forever
    my ($crc, $copier) = docker('create', '--label', 'smcp.fork=run_' . ('0' x 24),
                                '--label', "smcp.runner=$runner->{name}",
                                '-v', "smcp-$e:/from:ro", $s->image, 'true');
    is($crc, 0, 'a stale fork copier on its volume') or diag($copier);
    chomp $copier;
    ok(wait_until(60 + $IDLE, sub { ($t->redis('HGET', $key, 'state') // '') eq 'expired' }),
       'the janitor expired it');
    my ($rc) = docker('volume', 'inspect', "smcp-$e");
    isnt($rc, 0, 'its volume is removed');
    ($rc) = docker('inspect', $copier);
    isnt($rc, 0, '... the copier first');
    my $res = $s->call('opencode_run_task', { task => 'SCENARIO-IDLE: again', sessionId => $e });
    ok($res->{isError}, 'a run in it: isError');
    like(SMCP::Test::result_text($res), qr/Session expired/, '... saying the session expired');
    my $list = SMCP::Test::sc($s->call('opencode_list_sessions', { state => 'expired' }));
    my ($l) = grep { $_->{sessionId} eq $e } @{ $list->{sessions} || [] };
    is($l->{state}, 'expired', 'list_sessions: expired');
};

$s->done;
