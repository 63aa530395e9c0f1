#!/usr/bin/env perl
# Pull requests end to end (issue 9): MCP through nginx, build/smcp-runner,
# dockerd, the sandbox image with the real OpenCode; the model (scripted
# to edit files and commit) and GitHub (git smart-HTTP and REST) are the
# fakes of t/lib/SMCP/Fakes.pm.
#
#   1. createPullRequest: the run completes; the fake GitHub got the
#      branch opencode/<runId> with the agent's change (its own commit
#      and what it left uncommitted, by the configured author) and one
#      create-PR request with that head, base main, the run's title and a
#      body naming the files; main untouched; the push and the REST call
#      carried nginx's GitHub token, which the sandbox never had (its env
#      and files searched from inside); pullRequestUrl, pr_number,
#      pullRequestStatus-to-be (pr_status) and the pushed / pr_opened
#      events.
#   2. No changes: no branch, no pull request, pr_status no_changes,
#      pr_skipped "no changes".
#   3. A push the repository refuses: failed with git's words (the
#      hook's message); the diff still stored.
#   4. GitHub refuses the pull request (422): failed with GitHub's
#      message; hostile answers (2 MB, not JSON, no html_url, an html_url
#      on another host): failed, each saying so, nothing stored as a URL.
#   5. An agent that dies without an error event: its stderr's last words
#      are the run's error.
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

use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_encode);

my $AUTHOR = 'PR Bot';
my $EMAIL = 'pr-bot@example.test';

# the agent: commits one file itself, leaves another uncommitted, and
# looks for the GitHub token in its environment and files
my $COMMIT = <<'SH';
cd /workspace/repo && printf 'own\n' > own.txt && git add own.txt \
  && git commit -qm 'the agent commits' && echo COMMITTED
SH
# the pattern is put together when it runs: OpenCode logs the command's
# text (/workspace/.oc/data/opencode/log/opencode.log), which must not count
my $LOOK = <<'SH';
p=ghp_; p=${p}REAL
echo "TOKEN-ENV: $(env | grep -c "$p")"
echo "RUN-TOKEN: ${SMCP_RUN_TOKEN:+set}"
f=$(grep -rIl "$p" /workspace /home /tmp /etc /run 2>/dev/null)
echo "TOKEN-FILES: $(printf '%s' "$f" | grep -c .)${f:+ $f}"
echo "GITCONFIG: $(git config --global --list | grep -c "$p")"
SH
my $DIE = <<'SH';
printf 'fatal: the sandbox test says goodbye\n' > /proc/1/fd/2
kill -9 $PPID
SH

my $WRITE = { tool_use => { name => 'write', input => {
    filePath => '/workspace/repo/feature.txt', content => "the feature\n" } } };

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-PR'   => [ bash_step($COMMIT, 'Commit'), $WRITE,
                             bash_step($LOOK, 'Look'),
                             { text => 'Added the feature.' } ],
        'SCENARIO-NONE' => [ { text => 'Nothing to change.' } ],
        'SCENARIO-EDIT' => [ $WRITE, { text => 'Edited.' } ],
        'SCENARIO-DIE'  => [ bash_step($DIE, 'Die'), { text => 'unreachable' } ],
    },
    repos => { map { ("acme/$_" => { 'README.md' => "# $_\n" }) }
               qw(app none locked refused huge html nourl evil dies lost lostevil) },
);
my $t = $s->t;
my $gh = $s->github;
my $runner = $s->start_runner(concurrency => 4,
                              args => ['--git-author', "$AUTHOR <$EMAIL>"]);
my $real = $s->real->{GITHUB_TOKEN};
my %MAIN = map { ($_ => $gh->ref_commit("acme/$_", 'main')) }
           qw(app none locked refused);

sub steps {
    my ($id) = @_;
    return map { $_->{json} } grep { ref $_->{json} eq 'HASH' && defined $_->{json}{step} }
           $s->stored_events($id);
}

sub step { my ($id, $name) = @_; return (grep { $_->{step} eq $name } steps($id))[0] }

sub tool_output {
    my ($id) = @_;
    return join "\n", map { $_->{json}{part}{state}{output} // '' }
        grep { ($_->{json}{type} // '') eq 'tool_use' } $s->stored_events($id);
}

sub pr_run {
    my ($repo, $mark, %o) = @_;
    return $s->run_task(task => "SCENARIO-$mark: change $repo\nmore words",
                        repository => "https://github.com/acme/$repo",
                        createPullRequest => JSON::PP::true, %o);
}

sub done_ok {
    my ($run, $status, $what) = @_;
    my $r = $s->wait_done($run->{runId}, 300);
    is($r->{status}, $status, "$what: $status")
        or $s->diag_run($run->{runId}, $runner);
    return $r;
}

##############################################################################

my $t0 = time();
$gh->reject_pushes('acme/locked', 'push refused: the branch policy of acme/locked');
my $pr = pr_run('app', 'PR', title => 'Add the feature');
my $none = pr_run('none', 'NONE');
my $locked = pr_run('locked', 'EDIT');

subtest 'createPullRequest: branch, pull request, token only in nginx' => sub {
    my $r = done_ok($pr, 'completed', 'the run');
    my $id = $pr->{runId};
    my $h = $s->run_hash($id);
    my $branch = "opencode/$id";
    is($h->{pr_status}, 'opened', 'pr_status opened');
    is($h->{pr_number}, '1', 'pr_number 1');
    is($h->{pr_url}, 'https://github.com/acme/app/pull/1', 'pr_url');
    is($r->{pullRequestUrl}, 'https://github.com/acme/app/pull/1',
       'get_result: pullRequestUrl');

    is($gh->file_content('acme/app', $branch, 'feature.txt'), "the feature\n",
       'the branch has the uncommitted change');
    is($gh->file_content('acme/app', $branch, 'own.txt'), "own\n",
       '... and the agent\'s own commit');
    my $log = `git --git-dir=@{[ $gh->repo_path('acme/app') ]} log --format='%an <%ae>|%s' main..refs/heads/$branch 2>&1`;
    like($log, qr/^\Q$AUTHOR <$EMAIL>\E\|Add the feature$/m,
         'the commit of what was left: the configured author, the title');
    like($log, qr/\|the agent commits$/m, '... on top of the agent\'s commit');
    is($gh->ref_commit('acme/app', 'main'), $MAIN{app}, 'main untouched');

    my @pulls = $gh->pulls('acme/app');
    is(scalar @pulls, 1, 'one pull request');
    my $p = $pulls[0] || {};
    is($p->{head}{ref}, $branch, 'head: opencode/<runId>');
    is($p->{base}{ref}, 'main', 'base: the default branch');
    is($p->{title}, 'Add the feature', 'title: the run\'s');
    like($p->{body} // '', qr/Added the feature\./, 'body: the result');
    like($p->{body} // '', qr/feature\.txt.*own\.txt|own\.txt.*feature\.txt/s,
         'body: the files changed');
    ok(!$p->{draft}, 'not a draft');

    my ($push) = grep { ($_->{query} // '') !~ /service=/ }
                 $gh->requests(method => 'POST', path => qr{^/acme/app(\.git)?/git-receive-pack$});
    is($push->{auth}, 'ok', 'the push carried nginx\'s token');
    my ($api) = $gh->requests(method => 'POST', path => '/repos/acme/app/pulls');
    is($api->{headers}{authorization}, "Bearer $real", 'the REST call: nginx\'s token');
    is($api->{status}, 201, '... created');

    my $out = tool_output($id);
    like($out, qr/COMMITTED/, 'the agent committed');
    like($out, qr/^RUN-TOKEN: set$/m, 'the sandbox has its run token');
    like($out, qr/^TOKEN-ENV: 0$/m, 'the GitHub token is not in its environment');
    like($out, qr/^TOKEN-FILES: 0$/m, '... nor in its files');
    like($out, qr/^GITCONFIG: 0$/m, '... nor in its git config');

    my $pushed = step($id, 'pushed');
    is($pushed->{branch}, $branch, 'event pushed: the branch');
    like($pushed->{commit} // '', qr/^[0-9a-f]{40}$/, '... and its commit');
    is($pushed->{commit}, $gh->ref_commit('acme/app', $branch), '... the one GitHub has');
    my $opened = step($id, 'pr_opened');
    is($opened->{url}, 'https://github.com/acme/app/pull/1', 'event pr_opened: url');
    is($opened->{number}, 1, '... number');
    $s->timing('pull request run', time() - $t0);
};

subtest 'no changes: no branch, no pull request' => sub {
    done_ok($none, 'completed', 'the run');
    my $id = $none->{runId};
    my $h = $s->run_hash($id);
    is($h->{pr_status}, 'no_changes', 'pr_status no_changes');
    ok(!$h->{pr_url}, 'no pr_url');
    is(step($id, 'pr_skipped')->{reason}, 'no changes', 'event pr_skipped: no changes');
    ok(!exists $gh->refs('acme/none')->{"refs/heads/opencode/$id"}, 'no branch pushed');
    is_deeply([$gh->pulls('acme/none')], [], 'no pull request');
};

subtest 'a refused push: failed with git\'s words, the diff kept' => sub {
    my $r = done_ok($locked, 'failed', 'the run');
    my $id = $locked->{runId};
    like($r->{error} // '', qr/^git push failed: .*push refused: the branch policy of acme\/locked/s,
         'the error: the hook\'s message');
    is($s->run_hash($id)->{pr_status}, 'failed', 'pr_status failed');
    like(step($id, 'push_failed')->{message} // '', qr/pre-receive hook declined/,
         'event push_failed: git\'s words');
    is($r->{diffStat}, '1 file changed, 1 insertion(+)', 'the diff is stored');
    like($t->redis('GET', "smcp:run:$id:diff") // '', qr/^\+the feature$/m, '... whole');
    is($gh->ref_commit('acme/locked', 'main'), $MAIN{locked}, 'main untouched');
    is_deeply([$gh->pulls('acme/locked')], [], 'no pull request');
};

##############################################################################
# GitHub's refusals and hostile answers

$gh->api_fault('POST', '^/repos/acme/refused/pulls$', status => 422,
    body => json_encode({ message => 'Validation Failed', errors => [
        { resource => 'PullRequest', code => 'custom',
          message => "base branch policy forbids it\e[31m\x01" } ] }));
$gh->api_fault('POST', '^/repos/acme/huge/pulls$', status => 201,
    body => '{"html_url":"https://github.com/acme/huge/pull/1","number":1,"x":"'
            . ('x' x (2 * 1024 * 1024)) . '"}');
$gh->api_fault('POST', '^/repos/acme/html/pulls$', status => 201,
    content_type => 'text/html', body => "<html>created</html>\n");
$gh->api_fault('POST', '^/repos/acme/nourl/pulls$', status => 201,
    body => '{"number":7,"url":"https://api.github.com/repos/acme/nourl/pulls/7"}');
$gh->api_fault('POST', '^/repos/acme/evil/pulls$', status => 201,
    body => '{"number":7,"html_url":"https://evil.example/acme/evil/pull/7"}');

my %hostile = (
    refused => qr/^GitHub answered HTTP 422: Validation Failed: base branch policy forbids it/,
    huge    => qr/GitHub's answer is over \d+ bytes/,
    html    => qr/GitHub answered HTTP 201 without JSON/,
    nourl   => qr/GitHub's answer has no html_url/,
    evil    => qr{GitHub's answer has an html_url not on https://github\.com/},
);
# GitHub opens the pull request, but its answer is lost on the way
$gh->api_fault('POST', '^/repos/acme/lost/pulls$', status => 502, apply => 1,
    body => '{"message":"Server Error"}');

my %runs = map { ($_ => pr_run($_, 'EDIT')) } sort keys %hostile;
my $lost = pr_run('lost', 'EDIT');
# no answer to opening it, and a hostile answer to the look-up: an open
# pull request of its head whose html_url is elsewhere (the run id is
# known once run_task answers, long before its sandbox has pushed)
$gh->api_fault('POST', '^/repos/acme/lostevil/pulls$', status => 502,
    body => '{"message":"Server Error"}');
my $lostevil = pr_run('lostevil', 'EDIT');
$gh->api_fault('GET', '^/repos/acme/lostevil/pulls$', status => 200,
    body => json_encode([ { number => 9, state => 'open',
                            html_url => 'https://evil.example/acme/lostevil/pull/9',
                            head => { ref => "opencode/$lostevil->{runId}" } } ]));
my $dies = $s->run_task(task => 'SCENARIO-DIE: die', repository => 'https://github.com/acme/dies');

for my $repo (sort keys %hostile) {
    subtest "GitHub answers badly ($repo): failed, saying so" => sub {
        my $r = done_ok($runs{$repo}, 'failed', 'the run');
        my $h = $s->run_hash($runs{$repo}{runId});
        like($r->{error} // '', $hostile{$repo}, "the error says why: $r->{error}")
            or diag($r->{error});
        unlike($r->{error} // '', qr/[\x00-\x1f\x7f]/, '... in printable words');
        ok(length($r->{error} // '') <= 700, '... bounded');
        is($h->{pr_status}, 'failed', 'pr_status failed');
        ok(!$h->{pr_url}, 'no pr_url');
        ok(!defined $r->{pullRequestUrl}, 'no pullRequestUrl');
        is($r->{diffStat}, '1 file changed, 1 insertion(+)', 'the diff is stored');
        ok(exists $gh->refs("acme/$repo")->{"refs/heads/opencode/$runs{$repo}{runId}"},
           'the branch was pushed');
        # (a failure above says which run, its events and the runner's lines)
        $s->diag_run($runs{$repo}{runId}, $runner)
            unless Test::More->builder->is_passing;
    };
}

subtest "GitHub's answer to opening it lost: the open pull request found" => sub {
    my $r = done_ok($lost, 'completed', 'the run');
    my @p = $gh->pulls('acme/lost');
    is(scalar @p, 1, 'one pull request');
    is($r->{pullRequestUrl}, $p[0] && $p[0]{html_url}, '... its pullRequestUrl, looked up by its head');
    is($s->run_hash($lost->{runId})->{pr_status}, 'opened', 'pr_status opened');
    like($s->runner_log($runner), qr/the pull request of opencode\/\Q$lost->{runId}\E is open \(GitHub's answer to opening it: GitHub answered HTTP 502: Server Error\)/,
         "the runner's log says so");
};

subtest 'the look-up answered with a pull request elsewhere: not taken' => sub {
    my $r = done_ok($lostevil, 'failed', 'the run');
    like($r->{error} // '', qr/^GitHub answered HTTP 502: Server Error/,
         "the error: GitHub's answer to opening it") or diag($r->{error});
    ok(!defined $r->{pullRequestUrl}, 'no pullRequestUrl');
    is($s->run_hash($lostevil->{runId})->{pr_status}, 'failed', 'pr_status failed');
    ok(grep({ $_->{method} eq 'GET' && ($_->{query} // '') =~
              /head=acme%3Aopencode%2F\Q$lostevil->{runId}\E/ } $gh->requests),
       '... after it looked the pull request up by its head');
};

subtest 'an agent dying without an error event: its stderr is the error' => sub {
    my $r = done_ok($dies, 'failed', 'the run');
    like($r->{error} // '', qr/^the agent exited with code \d+: .*fatal: the sandbox test says goodbye/s,
         "the error: the exit code and the last words on stderr: $r->{error}");
    ok(length($r->{error}) <= 4096, '... bounded');
    # the agent killed its OpenCode server: bash's word of it (the sandbox
    # script's "line N: ... Killed") is not the agent's
    unlike($r->{error} // '', qr/smcp-sandbox-entry|Killed/,
           '... nothing of the sandbox\'s own script in it');
};

$s->done;
