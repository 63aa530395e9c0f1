#!/usr/bin/env perl
# Writes through the egress proxy: a run may push and open a pull request
# only when it asked for one (run hash create_pr = "1"), and then only its
# own branch opencode/<runId>; an attempt waiting for its pick (pr_pick =
# "1") only pushes, its pick run (pr_of) opens its pull request; a run
# that asked for a draft (draft = "1") opens a draft only.  A real git
# client pushes through nginx with the routes of egress-routes.sh to the
# fake GitHub (real git http-backend); every refused write leaves the
# fake's repository exactly as it was, and is answered with JSON the agent
# can read.
#
# SMCP_TEST_POLL=1 runs it on the static nginx under `use poll;` (the body
# of a push is read from a Redis callback: level-triggered events check
# that path too).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Compress::Gzip qw(gzip);
use IO::Socket::INET;
use MIME::Base64 qw(encode_base64);
use Test::More;
use SMCP::Test qw(:all);
use SMCP::Fakes;


my $real = 'ghp_REAL' . rhex();
my $t = SMCP::Test->new(workers => 2,
                        $ENV{SMCP_TEST_POLL} ? (need_static => 1, poll => 1) : ());

my $gh = SMCP::Fakes::start_github(token => $real);
my $base = $gh->create_repo('owner/repo', files => { 'README.md' => "hello\n" });
$gh->create_repo('other/repo', files => { 'README.md' => "other\n" });

my $eport = $t->free_port;
{
    local $ENV{GITHUB_TOKEN} = $real;
    local $ENV{GITHUB_URL} = $gh->url;
    local $ENV{GITHUB_API_URL} = $gh->url;
    local $ENV{SMCP_EGRESS_RATE} = '1000r/s';    # t/egress_limits.t tests it
    delete local @ENV{qw(ANTHROPIC_API_KEY OPENAI_API_KEY AZURE_OPENAI_API_KEY
                         GOOGLE_API_KEY CF_AIG_TOKEN COMPAT_API_KEY)};
    ok(eval { $t->render_routes }, 'egress-routes.sh renders the routes')
        or SMCP::Test::give_up("no routes: $@");
    $t->start(http => egress_server_conf("127.0.0.1:$eport"));
}

# two live runs on owner/repo: one asked for a pull request, one did not
my %run;
for my $pr (1, 0) {
    my ($id, $tok) = $t->live_run(repository => 'https://github.com/owner/repo',
                                  create_pr => $pr);
    $run{$pr} = { id => $id, tok => $tok, branch => "opencode/$id",
                  basic => 'Basic ' . encode_base64("x-access-token:$tok", '') };
}
my ($yes, $no) = @run{1, 0};

sub egress {
    my (%o) = @_;
    return $t->http(port => $eport, method => $o{method} // 'POST',
                    path => $o{path}, headers => $o{headers} // [],
                    body => $o{body}, timeout => 20);
}

# the fake's refs and pull requests, to show a refusal changed nothing
sub state { return json_encode([ $gh->refs('owner/repo'), [ $gh->pulls('owner/repo') ] ]) }

my $url = "http://127.0.0.1:$eport/github/owner/repo.git";
my $wd = $t->dir . '/clone';

sub git {
    my ($who, $cmd) = @_;
    my $out = `cd $wd && git -c 'http.extraHeader=Authorization: $who->{basic}' $cmd 2>&1`;
    return ($? >> 8, $out);
}

# reads work for both runs
for my $who ($no, $yes) {
    my $d = $t->dir . "/clone-$who->{id}";
    my $out = `git -c 'http.extraHeader=Authorization: $who->{basic}' clone -q $url $d 2>&1`;
    is($?, 0, "clone through the proxy (create_pr " . ($who == $yes ? 1 : 0) . ')')
        or diag($out);
}
`git -c 'http.extraHeader=Authorization: $yes->{basic}' clone -q $url $wd 2>&1`;
`cd $wd && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m one`;
my $one = `cd $wd && git rev-parse HEAD`;
chomp $one;

###############################################################################
# refused pushes: nothing changes upstream

my $before = state();
my @refused = (
    [ $yes, "push -q origin HEAD:refs/heads/main", 'push to main' ],
    [ $yes, "push -q --force origin HEAD~0:main", 'force push to main' ],
    [ $yes, "push -q origin HEAD:refs/heads/feature", 'push to another branch' ],
    [ $yes, "push -q origin HEAD:refs/tags/v1", 'push of a tag' ],
    [ $yes, "push -q origin HEAD:refs/heads/$yes->{branch} HEAD:refs/heads/other",
      'the run\'s branch and another in one push' ],
    [ $yes, "push -q origin HEAD:refs/heads/$no->{branch}", 'another run\'s branch' ],
    [ $no, "push -q origin HEAD:refs/heads/$no->{branch}", 'create_pr 0: its own branch' ],
    [ $yes, "push -q http://127.0.0.1:$eport/github/other/repo.git HEAD:refs/heads/$yes->{branch}",
      'another repository' ],
);
for my $c (@refused) {
    my ($who, $cmd, $name) = @$c;
    my ($rc, $out) = git($who, $cmd);
    isnt($rc, 0, "$name: git push fails");
    like($out, qr/403/, "$name: with 403") or diag($out);
    is(state(), $before, "$name: the repository is unchanged");
}

###############################################################################
# the run's own branch: created, updated, force-pushed

{
    my ($rc, $out) = git($yes, "push -q origin HEAD:refs/heads/$yes->{branch}");
    is($rc, 0, 'push of the run\'s branch opencode/<runId>') or diag($out);
    is($gh->ref_commit('owner/repo', $yes->{branch}), $one, '... upstream at the commit');
    is($gh->ref_commit('owner/repo', 'main'), $base, '... main untouched');

    `cd $wd && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m two`;
    ($rc, $out) = git($yes, "push -q origin HEAD:refs/heads/$yes->{branch}");
    is($rc, 0, 'a fast-forward of it') or diag($out);

    `cd $wd && git -c user.name=t -c user.email=t\@t commit -q --amend --allow-empty -m two-b`;
    my $amended = `cd $wd && git rev-parse HEAD`;
    chomp $amended;
    ($rc, $out) = git($yes, "push -q --force origin HEAD:refs/heads/$yes->{branch}");
    is($rc, 0, 'a force push of the run\'s own branch') or diag($out);
    is($gh->ref_commit('owner/repo', $yes->{branch}), $amended, '... upstream at the amended commit');

    $before = state();
    ($rc, $out) = git($yes, "push -q origin :refs/heads/$yes->{branch}");
    isnt($rc, 0, 'delete of the run\'s branch: git push fails');
    is(state(), $before, '... the branch is still there');
}

###############################################################################
# hand-made receive-pack requests

sub pkt { my $s = shift; return sprintf('%04x', length($s) + 4) . $s }

my $zero = '0' x 40;
my $head = $gh->ref_commit('owner/repo', $yes->{branch});
my $cmd_ok = pkt("$head $one refs/heads/$yes->{branch}\0 report-status\n") . '0000';
my $rp = '/github/owner/repo.git/git-receive-pack';
my @ct = ('Content-Type' => 'application/x-git-receive-pack-request');

$before = state();
{
    my $gz;
    gzip(\$cmd_ok, \$gz);
    egress_error_ok(egress(path => $rp, body => $gz,
                           headers => [ Authorization => $yes->{basic}, @ct,
                                        'Content-Encoding' => 'gzip' ]),
                    415, 'a gzip-encoded push', message => qr/Content-Encoding/);
    egress_error_ok(egress(path => $rp, body => $cmd_ok,
                           headers => [ Authorization => $yes->{basic}, @ct,
                                        'Content-Encoding' => 'identity, gzip' ]),
                    415, 'a push with two codings');
    egress_error_ok(egress(path => $rp, body => $cmd_ok,
                           headers => [ Authorization => $no->{basic}, @ct ]),
                    403, 'POST git-receive-pack of a create_pr 0 run', message => qr/pull request/);
    egress_error_ok(egress(path => $rp,
                           body => pkt("push-cert\0 report-status\n")
                                   . pkt("certificate version 0.1\n") . pkt("push-cert-end\n") . '0000',
                           headers => [ Authorization => $yes->{basic}, @ct ]),
                    403, 'a signed push (push-cert)', message => qr/push-cert/);
    egress_error_ok(egress(path => $rp, body => "0032$head $one",
                           headers => [ Authorization => $yes->{basic}, @ct ]),
                    400, 'a truncated command list');
    egress_error_ok(egress(path => $rp, body => "zzzz$head",
                           headers => [ Authorization => $yes->{basic}, @ct ]),
                    400, 'not pkt-lines', message => qr/malformed/);
    egress_error_ok(egress(path => $rp, body => pkt("$head $zero refs/heads/$yes->{branch}\0 report-status\n") . '0000',
                           headers => [ Authorization => $yes->{basic}, @ct ]),
                    403, 'a delete command', message => qr/delet/);
    egress_error_ok(egress(path => $rp,
                           body => pkt("shallow $one\n") . pkt("$zero $one refs/heads/main\0 report-status\n") . '0000',
                           headers => [ Authorization => $yes->{basic}, @ct ]),
                    403, 'main behind a shallow line', message => qr{refs/heads/main});
    egress_error_ok(egress(method => 'GET', path => $rp,
                           headers => [ Authorization => $yes->{basic} ]),
                    405, 'GET git-receive-pack');
    egress_error_ok(egress(method => 'GET', path => '/github/owner/repo.git/info/refs?service=git-receive-pack',
                           headers => [ Authorization => $no->{basic} ]),
                    403, 'receive-pack refs of a create_pr 0 run');
    for my $q ('', '?service=git-upload-pack&service=git-receive-pack', '?service=git-receive-pack&x=1') {
        egress_error_ok(egress(method => 'GET', path => "/github/owner/repo.git/info/refs$q",
                               headers => [ Authorization => $yes->{basic} ]),
                        403, "info/refs$q");
    }
    # bodies that arrive after the run check (the body handler runs later)
    my $main = pkt("$head $one refs/heads/main\0 report-status\n") . '0000';
    my $r = $t->http(port => $eport, method => 'POST', path => $rp,
                     headers => [ Authorization => $yes->{basic}, @ct ],
                     body_parts => [ substr($main, 0, 10), substr($main, 10, 50),
                                     substr($main, 60) ], part_delay => 0.3);
    is($r->{status}, 403, 'a body sent in parts: checked once it is all there (main: 403)');
    $r = $t->http(port => $eport, method => 'POST', path => $rp,
                  headers => [ Authorization => $yes->{basic}, @ct ],
                  body_parts => [ '00', '00' ], part_delay => 0.3);
    is($r->{status}, 200, '... an empty list in parts reaches git');

    # a pusher that goes away in the middle of its body
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$eport") or die $!;
    print $s "POST $rp HTTP/1.1\r\nHost: x\r\nAuthorization: $yes->{basic}\r\n"
           . "Content-Length: 100000\r\n\r\n" . substr($cmd_ok, 0, 40);
    sleep(0.3);         # a pause between the two: the part, then the close
    close $s;
    is(egress(method => 'GET', path => '/github/owner/repo.git/info/refs?service=git-receive-pack',
              headers => [ Authorization => $yes->{basic} ])->{status},
       200, 'a pusher gone mid-body: the proxy goes on');

    is(state(), $before, 'hand-made refusals changed nothing upstream');

    # git's probe before a large push: an empty command list passes
    $r = egress(path => $rp, body => '0000',
                   headers => [ Authorization => $yes->{basic}, @ct ]);
    is($r->{status}, 200, 'an empty command list (git\'s probe) reaches git');
    is(egress(method => 'GET', path => '/github/owner/repo.git/info/refs?service=git-receive-pack',
              headers => [ Authorization => $yes->{basic} ])->{status},
       200, 'receive-pack refs of a create_pr 1 run: 200');
    is(egress(method => 'GET', path => '/github/owner/repo.git/info/refs?service=git-upload-pack',
              headers => [ Authorization => $no->{basic} ])->{status},
       200, 'upload-pack refs of a create_pr 0 run: 200');
}

###############################################################################
# pull requests

{
    my $pulls = '/github-api/repos/owner/repo/pulls';
    my @h = (Authorization => "Bearer $yes->{tok}", 'Content-Type' => 'application/json');
    $before = state();
    for my $c (
        [ { title => 't', head => 'main', base => 'main' }, 403, 'head main' ],
        [ { title => 't', head => 'feature', base => 'main' }, 403, 'head another branch' ],
        [ { title => 't', head => $no->{branch}, base => 'main' }, 403, 'head another run\'s branch' ],
        [ { title => 't', head => "evil:$yes->{branch}", base => 'main' }, 403, 'head of another owner' ],
        [ { title => 't', head => "$yes->{branch}x", base => 'main' }, 403, 'head with a suffix' ],
        [ { title => 't', base => 'main' }, 403, 'no head' ],
        [ { title => 't', head => $yes->{branch}, head_repo => 'evil/repo', base => 'main' },
          403, 'head_repo' ],
    ) {
        my ($body, $status, $name) = @$c;
        egress_error_ok(egress(path => $pulls, headers => \@h, body => json_encode($body)),
                        $status, "pull request: $name");
    }
    egress_error_ok(egress(path => $pulls, headers => \@h,
                           body => qq({"title":"t","head":"main","head":"$yes->{branch}","base":"main"})),
                    400, 'pull request: duplicate head keys');
    egress_error_ok(egress(path => $pulls, headers => \@h, body => 'title=t&head=x'),
                    400, 'pull request: not JSON');
    my $gz;
    my $ok_body = json_encode({ title => 't', head => $yes->{branch}, base => 'main' });
    gzip(\$ok_body, \$gz);
    egress_error_ok(egress(path => $pulls, headers => [ @h, 'Content-Encoding' => 'gzip' ], body => $gz),
                    415, 'pull request: gzip');
    egress_error_ok(egress(path => $pulls,
                           headers => [ Authorization => "Bearer $no->{tok}", 'Content-Type' => 'application/json' ],
                           body => json_encode({ title => 't', head => $no->{branch}, base => 'main' })),
                    403, 'pull request of a create_pr 0 run', message => qr/pull request/);
    egress_error_ok(egress(method => 'DELETE', path => '/github-api/repos/owner/repo',
                           headers => \@h), 405, 'DELETE the repository');
    is(state(), $before, 'refused pull requests changed nothing upstream');

    is(egress(method => 'GET', path => $pulls,
              headers => [ Authorization => "Bearer $no->{tok}" ])->{status},
       200, 'listing pull requests: allowed for a create_pr 0 run');

    my $r = egress(path => $pulls, headers => \@h,
                   body => json_encode({ title => 'from the run', head => $yes->{branch}, base => 'main' }));
    is($r->{status}, 201, 'pull request with head opencode/<runId>: 201') or diag($r->{body});
    my @p = $gh->pulls('owner/repo');
    is(scalar(@p), 1, '... the fake has it');
    is($p[0]{head}{ref}, $yes->{branch}, '... headed by the run\'s branch');

    # owner:branch passes the proxy (the fake answers 422: already open)
    $r = egress(path => $pulls, headers => \@h,
                body => json_encode({ title => 'again', head => "owner:$yes->{branch}", base => 'main' }));
    is($r->{status}, 422, 'head owner:opencode/<runId> reaches GitHub (422 from it: a duplicate)');
    like($r->{body}, qr/Validation Failed/, '... GitHub\'s own answer');
}

###############################################################################
# attempts (issue 26, point 1): an attempt whose pull request waits for the
# pick (pr_pick) pushes its branch but opens no pull request; the pick run
# (pr_of the attempt) opens it; a run that asked for a draft opens a draft

{
    my $pulls = '/github-api/repos/owner/repo/pulls';
    my $own = 'https://github.com/owner/repo';
    my $as = sub {
        my ($tok) = @_;
        return [ Authorization => "Bearer $tok", 'Content-Type' => 'application/json' ];
    };
    my ($aid, $atok) = $t->live_run(repository => $own, create_pr => 1, draft => 0,
                                    pr_pick => 1, group_attempt => 2);
    my $abasic = 'Basic ' . encode_base64("x-access-token:$atok", '');
    my $d = $t->dir . '/clone-attempt';
    my $o = `git -c 'http.extraHeader=Authorization: $abasic' clone -q $url $d 2>&1`;
    is($?, 0, 'attempt (pr_pick): clone') or diag($o);
    `cd $d && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m attempt`;
    $o = `cd $d && git -c 'http.extraHeader=Authorization: $abasic' push -q origin HEAD:refs/heads/opencode/$aid 2>&1`;
    is($? >> 8, 0, 'attempt (pr_pick): push of its branch') or diag($o);
    ok($gh->ref_commit('owner/repo', "opencode/$aid"), '... upstream');

    my $b = state();
    for my $head ("opencode/$aid", "owner:opencode/$aid") {
        egress_error_ok(egress(path => $pulls, headers => $as->($atok),
                               body => json_encode({ title => 'mine', head => $head,
                                                     base => 'main' })),
                        403, "attempt (pr_pick): its own pull request (head $head)",
                        type => 'permission_error', message => qr/waits for the pick/);
    }
    egress_error_ok(egress(path => $pulls, headers => $as->($atok),
                           body => json_encode({ title => 'mine', head => "opencode/$aid",
                                                 base => 'main', draft => JSON::PP::true() })),
                    403, 'attempt (pr_pick): a draft of it', message => qr/waits for the pick/);
    is(state(), $b, 'attempt (pr_pick): no pull request opened');
    is(egress(method => 'GET', path => $pulls, headers => [ Authorization => "Bearer $atok" ])->{status},
       200, 'attempt (pr_pick): listing pull requests: allowed');

    # the pick run: no sandbox, the attempt's branch
    my ($pid, $ptok) = $t->live_run(repository => $own, create_pr => 1, draft => 0,
                                    pr_of => $aid);
    egress_error_ok(egress(path => $pulls, headers => $as->($ptok),
                           body => json_encode({ title => 'pick', head => "opencode/$pid",
                                                 base => 'main' })),
                    403, "pick run: a head of its own runId", message => qr{opencode/\Q$aid\E});
    my $r = egress(path => $pulls, headers => $as->($ptok),
                   body => json_encode({ title => 'picked', head => "opencode/$aid",
                                         base => 'main' }));
    is($r->{status}, 201, "pick run: the attempt's pull request opened") or diag($r->{body});
    my @p = grep { $_->{head}{ref} eq "opencode/$aid" } $gh->pulls('owner/repo');
    is(scalar(@p), 1, "... the fake has it, headed by the attempt's branch");

    # a draft run: only a draft
    my ($did, $dtok) = $t->live_run(repository => $own, create_pr => 1, draft => 1);
    my $dbasic = 'Basic ' . encode_base64("x-access-token:$dtok", '');
    $o = `cd $d && git -c 'http.extraHeader=Authorization: $dbasic' push -q origin HEAD:refs/heads/opencode/$did 2>&1`;
    is($? >> 8, 0, 'draft run: push of its branch') or diag($o);
    $b = state();
    for my $c ([ {}, 'no draft' ], [ { draft => JSON::PP::false() }, 'draft false' ],
               [ { draft => 'true' }, 'draft "true" (a string)' ],
               [ { draft => 1 }, 'draft 1' ]) {
        my ($extra, $what) = @$c;
        egress_error_ok(egress(path => $pulls, headers => $as->($dtok),
                               body => json_encode({ title => 'd', head => "opencode/$did",
                                                     base => 'main', %$extra })),
                        403, "draft run: a pull request with $what",
                        message => qr/draft pull request: its body must say "draft": true/);
    }
    is(state(), $b, 'draft run: no pull request opened');
    $r = egress(path => $pulls, headers => $as->($dtok),
                body => json_encode({ title => 'd', head => "opencode/$did", base => 'main',
                                      draft => JSON::PP::true() }));
    is($r->{status}, 201, 'draft run: a draft pull request opened') or diag($r->{body});
    @p = grep { $_->{head}{ref} eq "opencode/$did" } $gh->pulls('owner/repo');
    ok(@p == 1 && $p[0]{draft}, '... a draft in the fake');
}

###############################################################################
# a session's repositories: reads of each, writes only on the run's own

{
    $gh->create_repo('third/repo', files => { 'README.md' => "third\n" });
    my $own = 'https://github.com/owner/repo';
    my ($id, $tok) = $t->live_run(repository => $own, create_pr => 1,
                                  repositories => qq(["$own","https://github.com/other/repo"]));
    my $ses = { id => $id, tok => $tok, branch => "opencode/$id",
                basic => 'Basic ' . encode_base64("x-access-token:$tok", '') };
    my $gurl = "http://127.0.0.1:$eport/github";
    my $clone = sub {
        my ($repo, $dir) = @_;
        my $out = `git -c 'http.extraHeader=Authorization: $ses->{basic}' clone -q $gurl/$repo.git $dir 2>&1`;
        return ($? >> 8, $out);
    };
    my ($rc, $out) = $clone->('other/repo', $t->dir . '/ses-other');
    is($rc, 0, "session: clone of the session's other repository") or diag($out);
    ($rc, $out) = $clone->('owner/repo', $t->dir . '/ses-own');
    is($rc, 0, "session: clone of the run's own") or diag($out);
    ($rc, $out) = $clone->('third/repo', $t->dir . '/ses-third');
    isnt($rc, 0, 'session: clone of a repository not in the session fails');
    like($out, qr/403/, '... with 403');
    egress_error_ok(egress(method => 'GET',
                           path => '/github/third/repo.git/info/refs?service=git-upload-pack',
                           headers => [ Authorization => $ses->{basic} ]),
                    403, 'session: upload-pack refs of a repository not in the session',
                    message => qr/session's repositories/);
    is(egress(method => 'GET', path => '/github-api/repos/other/repo',
              headers => [ Authorization => "Bearer $tok" ])->{status},
       200, "session: REST read of the session's other repository");
    egress_error_ok(egress(method => 'GET', path => '/github-api/repos/third/repo',
                           headers => [ Authorization => "Bearer $tok" ]),
                    403, 'session: REST read of a repository not in the session');

    my $other = sub { json_encode([ $gh->refs('other/repo'), [ $gh->pulls('other/repo') ] ]) };
    my $ob = $other->();
    my $d = $t->dir . '/ses-other';
    `cd $d && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m s`;
    for my $c ([ "HEAD:refs/heads/$ses->{branch}", "the run's branch" ],
               [ 'HEAD:refs/heads/main', 'main' ]) {
        my $o = `cd $d && git -c 'http.extraHeader=Authorization: $ses->{basic}' push -q origin $c->[0] 2>&1`;
        isnt($? >> 8, 0, "session: push of $c->[1] to the session's other repository fails");
        like($o, qr/403/, '... with 403') or diag($o);
    }
    egress_error_ok(egress(method => 'GET',
                           path => '/github/other/repo.git/info/refs?service=git-receive-pack',
                           headers => [ Authorization => $ses->{basic} ]),
                    403, "session: receive-pack refs of the session's other repository",
                    message => qr/own repository/);
    egress_error_ok(egress(path => '/github-api/repos/other/repo/pulls',
                           headers => [ Authorization => "Bearer $tok",
                                        'Content-Type' => 'application/json' ],
                           body => json_encode({ title => 't', head => $ses->{branch},
                                                 base => 'main' })),
                    403, "session: a pull request on the session's other repository",
                    message => qr/own repository/);
    is($other->(), $ob, "session: the other repository is unchanged");

    my $b = state();
    $d = $t->dir . '/ses-own';
    `cd $d && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m s`;
    my $o = `cd $d && git -c 'http.extraHeader=Authorization: $ses->{basic}' push -q origin HEAD:refs/heads/main 2>&1`;
    isnt($? >> 8, 0, "session: push of main to the run's own repository fails");
    is(state(), $b, '... main unchanged');
    $o = `cd $d && git -c 'http.extraHeader=Authorization: $ses->{basic}' push -q origin HEAD:refs/heads/$ses->{branch} 2>&1`;
    is($? >> 8, 0, "session: push of the run's branch to its own repository") or diag($o);
}

###############################################################################
# GitHub Enterprise: GITHUB_API_URL with a path (https://HOST/api/v3): the
# routes render, nginx -t accepts them, and clone, push and the pull
# request go through, the REST calls under /api/v3

{
    my $gdir = $t->dir . '/ghe';
    mkdir $gdir;
    ok(eval {
        $t->render_routes(name => 'ghe', dir => $gdir,
                          GITHUB_TOKEN => $real, GITHUB_URL => $gh->url,
                          GITHUB_API_URL => $gh->url . '/api/v3',
                          SMCP_EGRESS_RATE => '1000r/s',
                          map { $_ => undef } qw(ANTHROPIC_API_KEY OPENAI_API_KEY
                              AZURE_OPENAI_API_KEY GOOGLE_API_KEY CF_AIG_TOKEN
                              COMPAT_API_KEY))
    }, 'GHE: egress-routes.sh renders the routes for GITHUB_API_URL .../api/v3')
        or diag($@);
    like($t->read_file("$gdir/ghe.conf"), qr{/api/v3}, '... the API path is in them');
    my $gport = $t->free_port;
    local $ENV{GITHUB_TOKEN} = $real;     # the egress instance reads it
    my $inst = eval {
        $t->start_nginx(name => 'ghe', listen => '',
                        http => egress_server_conf("127.0.0.1:$gport", name => 'ghe'));
    };
    ok($inst, 'GHE: nginx starts with them') or diag($@);
    my $conf = $t->dir . '/ghe/nginx.conf';
    my ($trc, $tout, $terr) = SMCP::Test::nginx_config_test($t->{nginx_bin}, '-p', "$gdir/",
        '-c', $conf, '-e', "$gdir/t.log");
    is($trc, 0, 'GHE: nginx -t accepts the configuration') or diag("$tout$terr");

    my ($id, $tok) = $t->live_run(repository => 'https://github.com/owner/repo', create_pr => 1);
    my $basic = 'Basic ' . encode_base64("x-access-token:$tok", '');
    my $d = "$gdir/clone";
    my $out = `git -c 'http.extraHeader=Authorization: $basic' clone -q http://127.0.0.1:$gport/github/owner/repo.git $d 2>&1`;
    is($?, 0, 'GHE: clone') or diag($out);
    `cd $d && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m ghe`;
    $out = `cd $d && git -c 'http.extraHeader=Authorization: $basic' push -q origin HEAD:refs/heads/opencode/$id 2>&1`;
    is($?, 0, "GHE: push of the run's branch") or diag($out);
    my $r = $t->http(port => $gport, method => 'POST', path => '/github-api/repos/owner/repo/pulls',
                     headers => [ Authorization => "Bearer $tok",
                                  'Content-Type' => 'application/json' ],
                     body => json_encode({ title => 'ghe', head => "opencode/$id", base => 'main' }),
                     timeout => 20);
    is($r->{status}, 201, 'GHE: the pull request is opened') or diag($r->{body});
    my $req = $gh->last_request(method => 'POST', path => qr{/pulls$});
    is($req && $req->{path}, '/api/v3/repos/owner/repo/pulls', '... under /api/v3');
    is($req && $req->{headers}{authorization}, "Bearer $real", "... with nginx's token");
    $r = $t->http(port => $gport, method => 'POST', path => '/github-api/repos/owner/repo/pulls',
                  headers => [ Authorization => "Bearer $tok", 'Content-Type' => 'application/json' ],
                  body => json_encode({ title => 'ghe', head => 'main', base => 'main' }), timeout => 20);
    is($r->{status}, 403, 'GHE: a pull request headed by main is refused');
}

###############################################################################
# audit and logs

{
    my @eg = map { $_->{json} } $t->run_events($yes->{id});
    ok((grep { $_->{path} =~ /git-receive-pack$/ && !$_->{granted} && $_->{status} == 403 } @eg),
       'audit: a refused push is recorded as not granted');
    ok((grep { $_->{path} =~ /git-receive-pack$/ && $_->{granted} && $_->{status} == 200 } @eg),
       'audit: the accepted push is recorded as granted');
    my $logs = $t->read_file('error.log') . $t->read_file('access.log');
    unlike($logs, qr/\Q$real\E/, 'logs: no GitHub token');
    unlike($logs, qr/\Q$yes->{tok}\E/, 'logs: no run token');
}

$gh->stop;
$t->done;
