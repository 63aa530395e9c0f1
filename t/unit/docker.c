/*
 * The runner's Docker client (runner/docker.c) against the real dockerd:
 * each call returns Docker's HTTP status, and the callers' decisions rest
 * on those statuses alone (no error text is read).  Everything it makes
 * is named smcp-dtest-<pid>-* and removed at the end.  Prints TAP.
 *
 * argv[1]: an image to run (a shell and `sleep`).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "runner.h"
#include "runner_globals.h"
#include "tap.h"


static char  err[RUNNER_ERRLEN];


static json_t *
spec(const char *image, const char *cmd, const char *net)
{
    return json_pack("{s:s, s:[s,s,s], s:{s:s}, s:{s:s}}", "Image", image,
                     "Cmd", "sh", "-c", cmd, "Labels", "smcp.test", "dtest",
                     "HostConfig", "NetworkMode", net);
}


int
main(int argc, char **argv)
{
    int      member, running, code;
    long     st;
    char     name[64], vol[64], net[64], peer[64], id[RUNNER_CONTAINER_SIZE];
    char     id2[RUNNER_CONTAINER_SIZE], mp[512];
    json_t  *s, *list;

    if (argc < 2) {
        fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
        return 2;
    }

    strcpy(config.docker_socket, "/var/run/docker.sock");
    curl_global_init(CURL_GLOBAL_DEFAULT);

    snprintf(name, sizeof(name), "smcp-dtest-%d-c", (int) getpid());
    snprintf(peer, sizeof(peer), "smcp-dtest-%d-peer", (int) getpid());
    snprintf(vol, sizeof(vol), "smcp-dtest-%d-v", (int) getpid());
    snprintf(net, sizeof(net), "smcp-dtest-%d-n", (int) getpid());

    ok(runner_docker_ping(err, sizeof(err)) == 200, "ping: 200");

    /* volumes */
    ok(runner_docker_volume_create(vol, "ses_x", err, sizeof(err)) == 201,
       "volume create: 201");
    st = runner_docker_volume_create(vol, "ses_x", err, sizeof(err));
    ok(st == 201 || st == 200, "volume create again: %ld (it is there)",
       st);
    ok(runner_docker_volume_mountpoint(vol, mp, sizeof(mp), err, sizeof(err))
       == 200 && mp[0] == '/', "volume mountpoint: 200, %s", mp);
    ok(runner_docker_volume_mountpoint("../x", mp, sizeof(mp), err,
                                       sizeof(err)) == RUNNER_DOCKER_INVALID,
       "a malformed name: refused before asking");

    /* containers */
    s = spec(argv[1], "sleep 60", "none");
    ok(runner_docker_create(s, name, id, sizeof(id), err, sizeof(err)) == 201
       && runner_docker_valid_id(id), "create: 201 and its id");
    ok(runner_docker_create(s, name, id2, sizeof(id2), err, sizeof(err))
       == 409, "create with the name taken: 409 (the caller replaces it)");
    json_decref(s);

    ok(runner_docker_start(id, err, sizeof(err)) == 204, "start: 204");
    ok(runner_docker_start(id, err, sizeof(err)) == 304,
       "start again: 304 (it runs)");
    ok(runner_docker_running(id, &running, err, sizeof(err)) == 200
       && running, "inspect: 200, running");
    ok(runner_docker_wait(id, 1, &code, err, sizeof(err))
       == RUNNER_DOCKER_TIMEOUT, "wait 1 s on a running one: timeout");

    list = NULL;
    ok(runner_docker_list("smcp.test=dtest", &list, err, sizeof(err)) == 200
       && json_array_size(list) >= 1, "list by label: 200, an array");
    json_decref(list);

    ok(runner_docker_kill(id, err, sizeof(err)) == 204, "kill: 204");
    code = -1;
    st = runner_docker_wait(id, 10, &code, err, sizeof(err));
    ok(st == 200 && code == 137, "wait: %ld, exit code %d (137)", st, code);
    ok(runner_docker_kill(id, err, sizeof(err)) == 409,
       "kill again: 409 (not running)");
    ok(runner_docker_remove(id, err, sizeof(err)) == 204, "remove: 204");
    ok(runner_docker_remove(id, err, sizeof(err)) == 404,
       "remove again: 404 (gone)");
    ok(runner_docker_running(id, &running, err, sizeof(err)) == 404,
       "inspect a removed one: 404");

    /* a volume in use by a container */
    snprintf(mp, sizeof(mp), "%s:/w", vol);
    s = json_pack("{s:s, s:[s,s,s], s:{s:s, s:[s]}}", "Image", argv[1],
                  "Cmd", "sh", "-c", "sleep 60", "HostConfig",
                  "NetworkMode", "none", "Binds", mp);
    ok(runner_docker_create(s, name, id, sizeof(id), err, sizeof(err)) == 201,
       "a container using the volume");
    json_decref(s);
    ok(runner_docker_volume_remove(vol, err, sizeof(err)) == 409,
       "volume remove while in use: 409 (the janitor tries later)");
    ok(runner_docker_remove(id, err, sizeof(err)) == 204,
       "... the container removed");

    /* the session network recipe: made, the peer joined; again: 409 on
     * create, 403 on connect (already on it), which the recipe asks the
     * network about */
    s = spec(argv[1], "sleep 60", "bridge");
    ok(runner_docker_create(s, peer, id2, sizeof(id2), err, sizeof(err))
       == 201 && runner_docker_start(id2, err, sizeof(err)) == 204,
       "a peer container runs");
    json_decref(s);

    ok(runner_docker_session_net(net, "ses_x", peer, err, sizeof(err))
       == RUNNER_OK, "session network: made, the peer on it");
    ok(runner_docker_network_create(net, "ses_x", err, sizeof(err)) == 409,
       "network create again: 409");
    ok(runner_docker_network_connect(net, peer, "egress", err, sizeof(err))
       == 403, "connect again: 403");
    ok(runner_docker_network_member(net, peer, &member, err, sizeof(err))
       == 200 && member, "the network lists the peer (by name)");
    ok(runner_docker_network_member(net, id2, &member, err, sizeof(err))
       == 200 && member, "... and by id");
    ok(runner_docker_session_net(net, "ses_x", peer, err, sizeof(err))
       == RUNNER_OK, "session network again (a re-attach): ok");
    ok(runner_docker_network_member(net, "smcp-nobody", &member, err,
                                    sizeof(err)) == 200 && !member,
       "another container is no member");
    ok(runner_docker_session_net_drop(net, peer, err, sizeof(err))
       == RUNNER_OK, "dropped: the peer leaves, the network goes");
    ok(runner_docker_network_remove(net, err, sizeof(err)) == 404,
       "network remove again: 404");
    ok(runner_docker_session_net_drop(net, peer, err, sizeof(err))
       == RUNNER_OK, "dropped again: ok (404)");

    ok(runner_docker_remove(id2, err, sizeof(err)) == 204,
       "the peer removed");
    ok(runner_docker_volume_remove(vol, err, sizeof(err)) == 204,
       "volume remove: 204");
    ok(runner_docker_volume_remove(vol, err, sizeof(err)) == 404,
       "volume remove again: 404");

    curl_global_cleanup();

    return tap_done();
}
