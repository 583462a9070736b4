/* --loopback: both ends on this host, the server in a child process. It hands its listen
 * handle to the client through a pipe, and its table through another, printed after the
 * client's. */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "perf.h"

/* CUDA must not be initialised before fork: a child tries it, and says what is missing.
 * Returns -1 when it worked, else the exit status. */
static int probeCuda(void) {
  fflush(stdout);
  pid_t probe = fork();
  if (probe < 0) die("fork: %s", strerror(errno));
  if (probe == 0) {
    cudaSetup(opt.cuda);
    _exit(0);
  }
  int st = 0;
  waitpid(probe, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  return -1;
}

/* The child: hands the handle through the pipe hp, its table through op. */
static void serverProcess(int hp[2], int op[2]) __attribute__((noreturn));
static void serverProcess(int hp[2], int op[2]) {
  close(hp[0]);
  close(op[0]);
  dup2(op[1], 1);
  close(op[1]);
  loadPlugin();
  NETCALL(netInit());
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void* lc = NULL;
  NETCALL(netListen(opt.dev, handle, &lc));
  if (writeAll(hp[1], handle, sizeof(handle))) die("pipe write failed");
  close(hp[1]);
  int rc = runServer(lc);
  fflush(stdout);
  _exit(rc);
}

/* The client's status, or 1 when the server process failed; then the server's output. */
static int clientProcess(pid_t pid, int hp[2], int op[2], const size_t* sizes, int nSizes) {
  close(op[1]);
  close(hp[1]);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (readAll(hp[0], handle, sizeof(handle))) {
    int st;
    waitpid(pid, &st, 0);
    serverChild = 0;
    die("the server process ended before it was listening");
  }
  close(hp[0]);
  if (opt.cuda >= 0) cudaSetup(opt.cuda);
  loadPlugin();
  NETCALL(netInit());
  printDevice();
  checkDevice(opt.recvs, opt.cuda >= 0);
  int rc = runClient(handle, sizes, nSizes);
  int st = 0;
  waitpid(pid, &st, 0);
  serverChild = 0;
  char buf[4096];
  ssize_t r;
  if (!opt.json)
    while ((r = read(op[0], buf, sizeof(buf))) > 0) fwrite(buf, 1, (size_t)r, stdout);
  close(op[0]);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "railnet-perf: the server process failed (%s %d)\n", WIFEXITED(st) ? "exit" : "signal",
            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    rc = 1;
  }
  return rc;
}

int runLoopback(const size_t* sizes, int nSizes) {
  if (opt.cuda >= 0) {
    int rc = probeCuda();
    if (rc >= 0) return rc;
  }
  int hp[2], op[2]; /* the handle; the server's output (printed after the client's) */
  if (pipe(hp) != 0 || pipe(op) != 0) die("pipe: %s", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid > 0) serverChild = pid;
  if (pid == 0) serverProcess(hp, op);
  return clientProcess(pid, hp, op, sizes, nSizes);
}
