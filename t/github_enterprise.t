#!/usr/bin/env perl
# GitHub Enterprise end to end (issue 9): the fake GitHub serves git at
# its root and REST under /api/v3, as GitHub Enterprise Server does;
# GITHUB_URL=http://<fake>, GITHUB_API_URL=http://<fake>/api/v3 (a URI
# with a path: egress-routes.sh must make nginx accept it), the module's
# sandbox_mcp_github_host and the runner's --git-host are the Enterprise
# host (ghe.test), whose https URLs the repositories and pull requests
# have.  One run with createPullRequest: cloned, pushed and its pull
# request opened through the egress proxy, html_url on the Enterprise
# host, every REST call under /api/v3.
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;

use SMCP::Stack;

my $HOST = 'ghe.test';

my $s = SMCP::Stack->new(
    location => "sandbox_mcp_github_host $HOST;",
    github => { web_base => "https://$HOST", api_base => "https://$HOST/api/v3" },
    github_api_path => '/api/v3',
    scripts => {
        'SCENARIO-GHE' => [ { tool_use => { name => 'write', input => {
                                filePath => '/workspace/repo/ghe.txt', content => "enterprise\n" } } },
                            { text => 'Written on Enterprise.' } ],
    },
    repos => { 'corp/app' => { 'README.md' => "# corp\n" } },
);
my $gh = $s->github;
my $runner = $s->start_runner(args => ['--git-host', $HOST]);

my $run = $s->run_task(task => 'SCENARIO-GHE: write', repository => "https://$HOST/corp/app",
                       createPullRequest => JSON::PP::true, baseBranch => 'main',
                       prTitle => 'Enterprise change', draft => JSON::PP::true);
my $id = $run->{runId};
my $r = $s->wait_done($id, 300);
is($r->{status}, 'completed', 'the run completed') or $s->diag_run($id, $runner);

my @ev = map { $_->{json} } grep { ref $_->{json} eq 'HASH' } $s->stored_events($id);
my ($clone) = grep { ($_->{step} // '') eq 'clone' } @ev;
is($clone->{repository}, "https://$HOST/corp/app", 'cloned from the Enterprise host');
is($gh->file_content('corp/app', "opencode/$id", 'ghe.txt'), "enterprise\n",
   'the branch pushed with the change');
my @pulls = $gh->pulls('corp/app');
is(scalar @pulls, 1, 'one pull request');
is($pulls[0]{head}{ref}, "opencode/$id", '... head opencode/<runId>');
is($pulls[0]{base}{ref}, 'main', '... base as asked');
is($pulls[0]{title}, 'Enterprise change', '... prTitle');
ok($pulls[0]{draft}, '... a draft');
is($r->{pullRequestUrl}, "https://$HOST/corp/app/pull/1", 'pullRequestUrl on the Enterprise host');
my @api = $gh->requests(path => qr{^/api/v3/repos/});
ok(@api >= 1, 'REST calls went to /api/v3');
is(scalar(() = $gh->requests(path => qr{^/repos/})), 0, '... and none to the root');
is($api[-1]{headers}{authorization}, 'Bearer ' . $s->real->{GITHUB_TOKEN},
   '... with nginx\'s token');

$s->done;
