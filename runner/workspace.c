/*
 * A session's workspace, measured from the host: the volume's directory
 * (its Mountpoint) walked as root, bytes allocated (st_blocks) and inodes
 * counted.  The tree is the agent's: no symlink is followed (every open is
 * O_NOFOLLOW relative to an open parent, every stat AT_SYMLINK_NOFOLLOW),
 * no other filesystem is entered, nothing but directories is opened, and
 * the work is bounded: the walk ends as soon as a limit is passed (so at
 * most --workspace-inodes entries are looked at), and at RUNNER_WS_DEPTH
 * open directories (a deeper tree is itself over the limit).  One walk at
 * a time in the process: open descriptors and disk time stay bounded.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner.h"


static pthread_mutex_t  runner_workspace_lock = PTHREAD_MUTEX_INITIALIZER;


static int
runner_workspace_over(runner_usage_t *u, int64_t max_bytes,
    int64_t max_inodes)
{
    return (max_bytes > 0 && u->bytes > max_bytes)
           || (max_inodes > 0 && u->inodes > max_inodes);
}


/* one directory more on the stack; -1 when it is not to be entered */
static int
runner_workspace_enter(DIR **stack, int depth, int parent, const char *name,
    dev_t dev)
{
    int          fd;
    struct stat  st;

    fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                              | O_NONBLOCK);
    if (fd < 0) {
        return -1;
    }

    /* what was opened is what was counted: a directory on this device */
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_dev != dev) {
        close(fd);
        return -1;
    }

    stack[depth] = fdopendir(fd);

    if (stack[depth] == NULL) {
        close(fd);
        return -1;
    }

    return 0;
}


/*
 * RUNNER_OK: u counted, up to the first limit passed (u->too_deep when the
 * tree nests deeper than RUNNER_WS_DEPTH); RUNNER_AGAIN: another walk is
 * going on; RUNNER_ERR: root cannot be read (err set).
 */
int
runner_workspace_usage(const char *root, int64_t max_bytes,
    int64_t max_inodes, runner_usage_t *u, char *err, size_t errlen)
{
    DIR            *stack[RUNNER_WS_DEPTH];
    int             depth, fd;
    dev_t           dev;
    struct stat     st;
    struct dirent  *de;

    memset(u, 0, sizeof(*u));

    if (pthread_mutex_trylock(&runner_workspace_lock) != 0) {
        return RUNNER_AGAIN;
    }

    fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", root, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        pthread_mutex_unlock(&runner_workspace_lock);
        return RUNNER_ERR;
    }

    dev = st.st_dev;
    u->inodes = 1;
    u->bytes = (int64_t) st.st_blocks * 512;

    stack[0] = fdopendir(fd);
    if (stack[0] == NULL) {
        snprintf(err, errlen, "%s: %s", root, strerror(errno));
        close(fd);
        pthread_mutex_unlock(&runner_workspace_lock);
        return RUNNER_ERR;
    }

    depth = 1;

    while (depth > 0 && !runner_workspace_over(u, max_bytes, max_inodes)) {

        de = readdir(stack[depth - 1]);

        if (de == NULL) {
            closedir(stack[--depth]);
            continue;
        }

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
            continue;
        }

        if (fstatat(dirfd(stack[depth - 1]), de->d_name, &st,
                    AT_SYMLINK_NOFOLLOW) != 0)
        {
            continue;               /* gone meanwhile */
        }

        u->inodes++;
        u->bytes += (int64_t) st.st_blocks * 512;

        if (!S_ISDIR(st.st_mode) || st.st_dev != dev) {
            continue;
        }

        if (depth == RUNNER_WS_DEPTH) {
            u->too_deep = 1;
            break;
        }

        if (runner_workspace_enter(stack, depth, dirfd(stack[depth - 1]),
                                   de->d_name, dev) == 0)
        {
            depth++;
        }
    }

    while (depth > 0) {
        closedir(stack[--depth]);
    }

    pthread_mutex_unlock(&runner_workspace_lock);

    return RUNNER_OK;
}
