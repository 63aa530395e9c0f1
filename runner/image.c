/*
 * The sandbox image's contract (docs/egress.md, "The sandbox image"), checked when
 * the runner starts: an image of one's own is built FROM ours and keeps
 * what the runner and the entry script rely on.  Docker's description of
 * the image says whether it does: the entry point, the user, the labels
 * ours carries (inherited by an image built FROM it).  A missing image is
 * not an error here (runs fail "sandbox missing" until it is built); an
 * image breaking the contract is: the runner does not start.
 *
 * A run may name its image (opencode_run_task's `image`, the run hash's
 * field): the runner's --image, or one of --allowed-images, checked again
 * when the run starts (it may have been rebuilt since).
 */

#include <string.h>

#include "runner.h"
#include "smcp_validate.h"


#define RUNNER_IMAGE_ENTRY     "/usr/local/bin/smcp-sandbox-entry"
#define RUNNER_IMAGE_CONTRACT  "2"   /* 2: a pooled one's run on stdin */
#define RUNNER_IMAGE_HOW       "build it FROM smcp-sandbox and keep its " \
                               "ENTRYPOINT, USER and labels (docs/egress.md, " \
                               "\"The sandbox image\")"


/* the string at key of obj, or "" */
static const char *
runner_image_str(json_t *obj, const char *key)
{
    const char  *s;

    s = json_string_value(json_object_get(obj, key));

    return s ? s : "";
}


/* what of the contract cfg (the image's Config) breaks, or NULL; an
 * agent's image says it is that agent's (agent NULL: not asked) */
static const char *
runner_image_breach(json_t *cfg, const char *agent)
{
    json_t      *ep, *labels;
    const char  *user, *entry;

    ep = json_object_get(cfg, "Entrypoint");
    entry = json_string_value(json_array_get(ep, 0));

    if (json_array_size(ep) != 1 || entry == NULL
        || strcmp(entry, RUNNER_IMAGE_ENTRY) != 0)
    {
        return "its entry point must be [\"" RUNNER_IMAGE_ENTRY "\"]";
    }

    user = runner_image_str(cfg, "User");

    if (strcmp(user, "1000:1000") != 0 && strcmp(user, "1000") != 0) {
        return "its user must be 1000:1000 (the sandbox user)";
    }

    labels = json_object_get(cfg, "Labels");

    if (strcmp(runner_image_str(labels, "smcp.image"), "sandbox") != 0) {
        return "it lacks the label smcp.image=sandbox (not built FROM "
               "smcp-sandbox)";
    }

    if (strcmp(runner_image_str(labels, "smcp.sandbox.contract"),
               RUNNER_IMAGE_CONTRACT) != 0)
    {
        return "its label smcp.sandbox.contract is not "
               RUNNER_IMAGE_CONTRACT " (built FROM an older or newer "
               "smcp-sandbox)";
    }

    if (agent && strcmp(runner_image_str(labels, "smcp.agent"), agent) != 0) {
        return "its label smcp.agent does not name the agent it is given "
               "for (runner/sandbox/build-agent-image makes one)";
    }

    return NULL;
}


/*
 * RUNNER_OK: the image follows the contract; RUNNER_AGAIN: it is not in
 * the engine (err says so); RUNNER_ERR: it breaks the contract or cannot
 * be inspected (err says which part, and what to do); RUNNER_RETRY: the
 * engine did not answer (no answer, or a 5xx): ask again
 */
static int
runner_image_check_for(const char *image, const char *agent, char *err,
    size_t errlen)
{
    long         st;
    json_t      *out;
    const char  *breach;
    char         derr[RUNNER_ERRLEN];

    st = runner_docker_image_inspect(image, &out, derr, sizeof(derr));

    if (st == 404) {
        json_decref(out);
        snprintf(err, errlen, "sandbox image %s is not in the engine: runs "
                 "fail until it is built (runner/sandbox/build-image)",
                 image);
        return RUNNER_AGAIN;
    }

    if (st != 200) {
        json_decref(out);
        snprintf(err, errlen, "sandbox image %s cannot be inspected: %s",
                 image, derr);
        return (st == RUNNER_DOCKER_DOWN || st == RUNNER_DOCKER_TIMEOUT
                || st >= 500) ? RUNNER_RETRY : RUNNER_ERR;
    }

    breach = runner_image_breach(json_object_get(out, "Config"), agent);

    if (breach) {
        snprintf(err, errlen, "sandbox image %s does not follow the sandbox "
                 "contract: %s; " RUNNER_IMAGE_HOW, image, breach);
    }

    json_decref(out);

    return breach ? RUNNER_ERR : RUNNER_OK;
}


int
runner_image_check(const char *image, char *err, size_t errlen)
{
    return runner_image_check_for(image, NULL, err, errlen);
}


/*
 * The next AGENT=IMAGE of --agent-images: 1 and image set, agent's end at
 * eq (a NUL there); 0 at the end; -1 for an entry of no known agent (err
 * says so)
 */
static int
runner_image_agent_next(const char **p, char *entry, size_t size,
    char **image, char *err, size_t errlen)
{
    char  *eq;

    if (!runner_config_list_next(p, entry, size)) {
        return 0;
    }

    eq = strchr(entry, '=');

    if (eq == NULL || eq[1] == '\0'
        || smcp_agent_provider(entry, eq - entry) == NULL
        || strncmp(entry, SMCP_AGENT_DEFAULT, eq - entry) == 0)
    {
        snprintf(err, errlen, "--agent-images: \"%.200s\": want AGENT=IMAGE, "
                 "AGENT claude-code or codex", entry);
        return -1;
    }

    *eq = '\0';
    *image = eq + 1;

    return 1;
}


/*
 * The image of a run of agent (not OpenCode): its --agent-images entry,
 * following the contract now; RUNNER_ERR (err says why) when this runner
 * runs no such agent
 */
int
runner_image_for_agent(const char *agent, char *image, size_t size,
    char *err, size_t errlen)
{
    int          rc;
    char        *name, entry[512];
    const char  *p;

    p = runner_config->agent_images;

    while ((rc = runner_image_agent_next(&p, entry, sizeof(entry), &name,
                                         err, errlen))
           == 1)
    {
        if (strcmp(entry, agent) != 0) {
            continue;
        }

        if (strlen(name) >= size) {
            break;
        }

        if (runner_image_check_for(name, agent, err, errlen) != RUNNER_OK) {
            return RUNNER_ERR;
        }

        snprintf(image, size, "%s", name);
        return RUNNER_OK;
    }

    snprintf(err, errlen, "the agent %.32s is not one this runner runs "
             "(--agent-images)", agent);

    return RUNNER_ERR;
}


/* every image of --allowed-images and --agent-images, as
 * runner_image_check() */
int
runner_image_check_allowed(char *err, size_t errlen)
{
    int          rc, k;
    char        *image, name[512];
    const char  *p;

    p = runner_config->agent_images;

    while ((k = runner_image_agent_next(&p, name, sizeof(name), &image, err,
                                        errlen))
           != 0)
    {
        if (k < 0) {
            return RUNNER_ERR;
        }

        rc = runner_image_check_for(image, name, err, errlen);

        if (rc == RUNNER_ERR || rc == RUNNER_RETRY) {
            return rc;
        }

        if (rc == RUNNER_AGAIN) {
            runner_log("warn", NULL, "%s", err);
        }
    }

    p = runner_config->allowed_images;

    while (runner_config_list_next(&p, name, sizeof(name))) {
        rc = runner_image_check(name, err, errlen);

        if (rc == RUNNER_ERR || rc == RUNNER_RETRY) {
            return rc;
        }

        if (rc == RUNNER_AGAIN) {
            runner_log("warn", NULL, "%s", err);
        }
    }

    return RUNNER_OK;
}


/*
 * The image of a run that names wanted (NULL or "": --image) into image:
 * RUNNER_OK; RUNNER_ERR when this runner does not offer it, or it breaks
 * the contract now (err says so: the run fails with it)
 */
int
runner_image_for_run(const char *wanted, char *image, size_t size,
    char *err, size_t errlen)
{
    if (wanted == NULL || *wanted == '\0'
        || strcmp(wanted, runner_config->image) == 0)
    {
        snprintf(image, size, "%s", runner_config->image);
        return RUNNER_OK;
    }

    if (!runner_config_offers(runner_config, wanted)
        || strlen(wanted) >= size)
    {
        snprintf(err, errlen, "the image %.200s is not one this runner "
                 "offers (--image, --allowed-images)", wanted);
        return RUNNER_ERR;
    }

    if (runner_image_check(wanted, err, errlen) != RUNNER_OK) {
        return RUNNER_ERR;
    }

    snprintf(image, size, "%s", wanted);

    return RUNNER_OK;
}
