/* railnet-diag --cluster, rank 0 (cluster.h): it listens at the rendezvous, takes the ranks'
 * JOINs until all came or --timeout passed, prints the plan and its bound, then runs the
 * rounds: every rank gets a ROUND (its partner and role, or none), the client of each pair
 * reports the LINK; a rank whose connection ends is dead from then on and not waited for. The
 * pairs of the links that read slow are checked once more (a few rounds at most). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "cluster.h"
#include "diag.h"

static void peerAddr(int fd, int local, uint8_t* family, uint8_t* addr) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  memset(addr, 0, 16);
  *family = 4;
  if ((local ? getsockname(fd, (struct sockaddr*)&ss, &len) : getpeername(fd, (struct sockaddr*)&ss, &len)) != 0)
    return;
  if (ss.ss_family == AF_INET) {
    memcpy(addr, &((struct sockaddr_in*)&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    const uint8_t* a6 = ((struct sockaddr_in6*)&ss)->sin6_addr.s6_addr;
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a6, v4mapped, 12) == 0) memcpy(addr, a6 + 12, 4);
    else *family = 6, memcpy(addr, a6, 16);
  }
}

/* A JOIN that came whole on connection fd: 0 when it is a rank of this run not seen before
 * (the rank keeps fd), else -1 (said why). */
static int admitJoin(clusterRun* run, int fd, const railnetClusterJoinMsg* jm) {
  railnetClusterJoinMsg j = *jm;
  int r = (int)j.rank;
  if (j.jobToken != run->o->token) {
    pairLog("--cluster: JOIN of rank %d from %s refused: its job token is not this job's (%s); start every rank "
            "with the same --token, or under one launcher job", r, j.host,
            run->o->tokenFrom ? run->o->tokenFrom : "rank 0 has none");
    return -1;
  }
  if ((int)j.size != run->o->size || r <= 0 || run->ranks[r].joined) {
    pairLog("--cluster: JOIN of rank %d of %u from %s refused (%s)", r, j.size, j.host,
            (int)j.size != run->o->size ? "another size" : r == 0 ? "rank 0 is this one" : "rank seen already");
    return -1;
  }
  clusterRank* k = &run->ranks[r];
  k->joined = k->alive = 1, k->fd = fd, k->join = j;
  peerAddr(fd, 0, &k->family, k->addr);
  if (run->ranks[0].family == 0) peerAddr(fd, 1, &run->ranks[0].family, run->ranks[0].addr);
  return 0;
}

#define JOIN_PENDING 64 /* connections whose JOIN is awaited side by side */

/* A connection whose JOIN is awaited: what came of it so far, since when. */
typedef struct {
  int fd;
  uint64_t since;
  railnetPairPartial part;
} pendingJoin;

/* Reads what connection w has of its JOIN: 1 while it is still to come (within PAIR_PROBE_MS
 * of its accept), else 0 (a rank admitted, or the connection refused and closed). */
static int stepJoin(clusterRun* run, pendingJoin* w, int ready, uint64_t now, int* joined) {
  railnetPairMsg m;
  char why[128] = "";
  int got = ready ? railnetPairRecvStep(w->fd, &w->part, RAILNET_CLUSTER_JOIN, &m, why) : 0;
  if (got == 0 && now < w->since + PAIR_PROBE_MS * 1000000ull) return 1;
  if (got == 1) {
    int ok = admitJoin(run, w->fd, m.u.join) == 0;
    railnetPairFree(&m);
    if (ok) {
      (*joined)++;
      return 0;
    }
  } else if (got == 0) {
    pairLog("--cluster: a connection without a whole JOIN within %d ms refused (%zu bytes came)", PAIR_PROBE_MS,
            w->part.got);
  } else {
    pairLog("--cluster: a connection without a JOIN refused: %s", why);
  }
  close(w->fd);
  return 0;
}

/* JOINs until every rank came or the deadline; returns how many came (rank 0 included). The
 * connections are read side by side, a piece at a time, each with PAIR_PROBE_MS for its JOIN
 * from its accept, so idle strangers (health checkers, port scanners) and ones that send part
 * of a JOIN delay no rank; past JOIN_PENDING of them the oldest is dropped. */
static int gatherJoins(clusterRun* run, int lfd, uint64_t deadline) {
  struct pollfd p[1 + JOIN_PENDING];
  pendingJoin* pend = (pendingJoin*)calloc(JOIN_PENDING, sizeof(*pend));
  int n = 0, joined = 1;
  if (pend == NULL)
    pairLog("--cluster: out of memory for the JOINs awaited (%zu bytes): no rank can join; free memory "
            "on rank 0's host and run again", JOIN_PENDING * sizeof(*pend));
  while (pend && joined < run->o->size && railnetClockNs() < deadline) {
    p[0] = (struct pollfd){lfd, POLLIN, 0};
    for (int i = 0; i < n; i++) p[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
    if (poll(p, (nfds_t)(1 + n), 100) < 0 && errno != EINTR) break;
    uint64_t now = railnetClockNs();
    int kept = 0;
    for (int i = 0; i < n; i++)
      if (stepJoin(run, &pend[i], p[1 + i].revents != 0, now, &joined)) pend[kept++] = pend[i];
    n = kept;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = pairAccept(lfd, NULL, NULL);
    if (fd < 0) continue;
    if (n == JOIN_PENDING) { /* the oldest goes */
      pairLog("--cluster: %d connections wait for their JOIN: the oldest is dropped", JOIN_PENDING);
      close(pend[0].fd);
      memmove(pend, pend + 1, (JOIN_PENDING - 1) * sizeof(*pend));
      n--;
    }
    memset(&pend[n], 0, sizeof(pend[n]));
    pend[n].fd = fd, pend[n++].since = railnetClockNs();
  }
  for (int i = 0; i < n; i++) close(pend[i].fd);
  free(pend);
  return joined;
}

static void sendRound(clusterRun* run, int r, int round, int partner, int client) {
  clusterRank* k = &run->ranks[r];
  if (r == 0 || !k->alive) return;
  railnetClusterRoundMsg m;
  memset(&m, 0, sizeof(m));
  m.round = (uint32_t)round, m.rounds = (uint32_t)(run->rounds + run->againRounds), m.partner = partner, m.client = (uint8_t)client;
  m.boundMs = CLUSTER_CHECK_MS;
  m.family = 4;
  if (partner >= 0) {
    m.family = run->ranks[partner].family;
    memcpy(m.addr, run->ranks[partner].addr, 16);
    m.port = run->ranks[partner].join.listenPort;
  }
  if (railnetPairSend(k->fd, RAILNET_CLUSTER_ROUND, &m, 1, railnetClockNs() + 5000000000ull) != 0) {
    pairLog("--cluster: rank %d (%s) went away", r, k->join.host);
    k->alive = 0;
  }
}

/* A pair's outcome: a new link, or in a round that measures again, the better figure of each
 * direction of the link measured before (a direction slow twice is slow; once was noise). */
static void addLink(clusterRun* run, const railnetClusterLinkMsg* l) {
  for (int i = 0; run->again && i < run->nLinks; i++) {
    railnetClusterLinkMsg* o = &run->links[i];
    int same = o->a == l->a && o->b == l->b;
    if (!same && !(o->a == l->b && o->b == l->a)) continue;
    if (o->ok != 1 || l->ok != 1) return; /* the first outcome stands */
    uint32_t ab = same ? l->kbps : l->kbpsBack, ba = same ? l->kbpsBack : l->kbps;
    if (ab > o->kbps) o->kbps = ab;
    if (ba > o->kbpsBack) o->kbpsBack = ba;
    run->times[i]++;
    return;
  }
  run->times[run->nLinks] = 1;
  run->links[run->nLinks++] = *l;
}

/* The LINKs of this round's clients (other than rank 0; waiting[i] checks partner[i]), until
 * each came or its rank went. A LINK of another round (a rank whose check overran its bound)
 * is dropped: it would be filed under this round's pair. */
static void collectLinks(clusterRun* run, int round, const int* waiting, const int* partner, int n,
                         uint64_t deadline) {
  int left = n;
  int* pending = (int*)calloc((size_t)(n ? n : 1), sizeof(int));
  for (int i = 0; pending && i < n; i++) pending[i] = waiting[i];
  while (pending && left > 0 && railnetClockNs() < deadline) {
    for (int i = 0; i < n; i++) {
      int r = pending[i];
      if (r < 0) continue;
      clusterRank* k = &run->ranks[r];
      struct pollfd p = {k->fd, POLLIN, 0};
      if (!k->alive || poll(&p, 1, 0) != 1) {
        if (!k->alive) pending[i] = -1, left--;
        continue;
      }
      railnetPairMsg m;
      char why[128] = "";
      if (railnetPairExpect(k->fd, RAILNET_CLUSTER_LINK, &m, railnetClockNs() + 5000000000ull, why) != 0) {
        pairLog("--cluster: rank %d (%s) went away: %s", r, k->join.host, why[0] ? why : "its connection ended");
        k->alive = 0;
      } else {
        railnetClusterLinkMsg l = *m.u.link;
        railnetPairFree(&m);
        if ((int)l.round != round) {
          pairLog("--cluster: rank %d (%s) sent the LINK of round %u in round %d: dropped (its check overran)", r,
                  k->join.host, l.round + 1, round + 1);
          continue;
        }
        /* the pair is the one rank 0 gave, whatever the rank claims */
        l.a = (uint32_t)r, l.b = (uint32_t)partner[i];
        addLink(run, &l);
      }
      pending[i] = -1, left--;
    }
    usleep(2000);
  }
  /* a rank still there that sent nothing: its check overran the round's bound (its LINK,
   * if it comes, is dropped in a later round); the pair is reported, not left out */
  for (int i = 0; pending && i < n; i++) {
    int r = pending[i];
    if (r < 0 || !run->ranks[r].alive) continue;
    railnetClusterLinkMsg l;
    memset(&l, 0, sizeof(l));
    l.round = (uint32_t)round, l.a = (uint32_t)r, l.b = (uint32_t)partner[i], l.ok = 0;
    sfmt(l.cause, sizeof(l.cause), "rank %d sent no result within the round's bound (%d s)", r,
         (CLUSTER_CHECK_MS + 5000) / 1000);
    sfmt(l.fix, sizeof(l.fix), "run railnet-diag --serve on rank %d's node and --pair from rank %d's to see what takes "
         "that long", l.b, r);
    pairLog("--cluster: rank %d (%s) sent no LINK in round %d", r, run->ranks[r].join.host, round + 1);
    addLink(run, &l);
  }
  free(pending);
}

/* Rank 0's own pair check, in a thread of its own while rank 0 collects the others' LINKs. */
typedef struct {
  const pairServer* sv;
  railnetClusterRoundMsg round;
  railnetClusterLinkMsg link;
} selfCheck;

static void* selfCheckRun(void* arg) {
  selfCheck* c = (selfCheck*)arg;
  clusterCheck(c->sv, 0, &c->round, &c->link);
  return NULL;
}

/* One round among the ranks still alive: the np disjoint pairs (a < b) checked side by side. */
static void runPairs(clusterRun* run, const pairServer* sv, const int* alive, int nAlive, int round,
                     int (*pairs)[2], int np) {
  int* waiting = (int*)calloc(2 * ((size_t)nAlive + 1), sizeof(int));
  int* partner = waiting ? waiting + nAlive + 1 : NULL;
  if (waiting == NULL) return;
  int nWait = 0, rounds = run->rounds + run->againRounds;
  uint64_t start = railnetClockNs();
  int busy[RAILNET_CLUSTER_MAX_RANKS] = {0};
  for (int i = 0; i < np; i++) { /* the lower rank checks the higher */
    busy[pairs[i][0]] = busy[pairs[i][1]] = 1;
    sendRound(run, pairs[i][0], round, pairs[i][1], 1);
    sendRound(run, pairs[i][1], round, pairs[i][0], 0);
    if (pairs[i][0] != 0) partner[nWait] = pairs[i][1], waiting[nWait++] = pairs[i][0];
  }
  for (int i = 0; i < nAlive; i++)
    if (!busy[alive[i]]) sendRound(run, alive[i], round, -1, 0);
  selfCheck self;
  pthread_t thread;
  int own = 0;
  for (int i = 0; i < np && !own; i++)
    if (pairs[i][0] == 0) { /* rank 0's own check, while the others run theirs */
      railnetClusterRoundMsg* m = &self.round;
      memset(&self, 0, sizeof(self));
      self.sv = sv;
      m->round = (uint32_t)round, m->rounds = (uint32_t)rounds, m->partner = pairs[i][1], m->client = 1;
      m->family = run->ranks[pairs[i][1]].family, m->port = run->ranks[pairs[i][1]].join.listenPort;
      memcpy(m->addr, run->ranks[pairs[i][1]].addr, 16);
      m->boundMs = CLUSTER_CHECK_MS;
      own = pthread_create(&thread, NULL, selfCheckRun, &self) == 0 ? 1 : -1;
      if (own < 0) selfCheckRun(&self); /* no thread: checked here, before the others' LINKs */
    }
  collectLinks(run, round, waiting, partner, nWait, start + (CLUSTER_CHECK_MS + 5000) * 1000000ull);
  if (own > 0) pthread_join(thread, NULL); /* its check ends by its own bound, CLUSTER_CHECK_MS */
  if (own) addLink(run, &self.link);
  if (run->again)
    fprintf(stderr, "railnet-diag --cluster: again %d/%d: %d pair%s in %.1f s (links that read slow, measured again)\n",
            round - run->rounds + 1, run->againRounds, np, np == 1 ? "" : "s", (double)(railnetClockNs() - start) / 1e9);
  else
    fprintf(stderr, "railnet-diag --cluster: round %d/%d: %d pair%s in %.1f s\n", round + 1, run->rounds, np,
            np == 1 ? "" : "s", (double)(railnetClockNs() - start) / 1e9);
  free(waiting);
}

static void runRound(clusterRun* run, const pairServer* sv, const int* alive, int nAlive, int round) {
  int (*pairs)[2] = calloc((size_t)nAlive / 2 + 1, sizeof(*pairs));
  if (pairs == NULL) return;
  int np = railnetClusterRound(alive, nAlive, round, pairs, nAlive / 2 + 1);
  runPairs(run, sv, alive, nAlive, round, pairs, np);
  free(pairs);
}

/* The pairs (a < b) of the links that read slow now (the verdict's slow links: a slow
 * direction between two ranks that are not slow), into todo with how often each was
 * measured; returns how many. */
static int slowPairs(const clusterRun* run, int (*todo)[3]) {
  railnetClusterLink* l = clusterJudgedLinks(run);
  int* up = (int*)calloc((size_t)run->o->size, sizeof(int));
  int n = 0;
  if (l && up) {
    railnetClusterVerdict v;
    for (int r = 0; r < run->o->size; r++) up[r] = run->ranks[r].alive;
    railnetClusterJudge(run->o->size, up, l, run->nLinks, CLUSTER_SLOW_FRACTION, &v);
    for (int i = 0; i < v.nSlowLinks; i++) {
      int a = v.slowLinks[i][0] < v.slowLinks[i][1] ? v.slowLinks[i][0] : v.slowLinks[i][1];
      int b = v.slowLinks[i][0] ^ v.slowLinks[i][1] ^ a, seen = 0;
      for (int j = 0; j < n && !seen; j++) seen = todo[j][0] == a && todo[j][1] == b;
      if (seen) continue;
      todo[n][0] = a, todo[n][1] = b, todo[n][2] = 1;
      for (int j = 0; j < run->nLinks; j++)
        if ((int)(run->links[j].a ^ run->links[j].b) == (a ^ b) && ((int)run->links[j].a == a || (int)run->links[j].b == a))
          todo[n][2] = run->times[j];
      n++;
    }
    railnetClusterVerdictFree(&v);
  }
  free(l);
  free(up);
  return n;
}

/* The pairs of the links that read slow checked again, in at most CLUSTER_AGAIN_ROUNDS
 * rounds of disjoint pairs, the best figure of each direction kept (a host's hiccup during
 * one transfer is no bad cable); each round judges afresh (better figures move the median,
 * and with it the threshold) and checks the pairs that still read slow. */
static void measureAgain(clusterRun* run, const pairServer* sv, const int* alive, int nAlive) {
  int (*todo)[3] = calloc((size_t)run->nLinks + 1, sizeof(*todo));
  int (*pairs)[2] = calloc((size_t)nAlive / 2 + 1, sizeof(*pairs));
  char* busy = (char*)calloc((size_t)run->o->size, 1);
  run->again = 1;
  for (int c = 0; todo && pairs && busy && c < run->againRounds; c++) {
    int n = slowPairs(run, todo), np = 0;
    memset(busy, 0, (size_t)run->o->size);
    /* the pairs measured least often first: a slow link that stays slow does not keep a
     * pair that shares a rank with it from its turn */
    for (int times = 1; times <= 1 + c; times++)
      for (int j = 0; j < n; j++) {
        int a = todo[j][0], b = todo[j][1];
        if (todo[j][2] != times || busy[a] || busy[b] || !run->ranks[a].alive || !run->ranks[b].alive) continue;
        busy[a] = busy[b] = 1;
        pairs[np][0] = a, pairs[np][1] = b, np++;
      }
    if (np == 0) break;
    runPairs(run, sv, alive, nAlive, run->rounds + c, pairs, np);
  }
  run->again = 0;
  free(todo);
  free(pairs);
  free(busy);
}

static void printPlan(clusterRun* run, int nAlive) {
  run->rounds = railnetClusterRounds(nAlive);
  run->againRounds = run->rounds > 0 && nAlive > 2 ? CLUSTER_AGAIN_ROUNDS : 0;
  run->boundS = (double)(run->rounds + run->againRounds) * (CLUSTER_CHECK_MS + 5000) / 1000.0;
  fprintf(stderr,
          "railnet-diag --cluster: %d of %d ranks came; %d round%s of at most %d pairs, then at most %d to measure "
          "again the links that read slow, each check <= %d s: at most %.0f s\n",
          nAlive, run->o->size, run->rounds, run->rounds == 1 ? "" : "s", nAlive / 2, run->againRounds,
          CLUSTER_CHECK_MS / 1000, run->boundS);
}

int clusterCoordinate(const clusterOptions* o, const pairServer* sv) {
  char host[256];
  int port = 0, lfd = -1;
  uint16_t bound = 0;
  if (clusterSplitHostPort(o->rendezvous, host, sizeof(host), &port) || railnetPairListen((uint16_t)port, &lfd, &bound)) {
    fprintf(stderr, "railnet-diag --cluster: rank 0 cannot listen at the rendezvous %s: %s\n", o->rendezvous,
            strerror(errno ? errno : EINVAL));
    return 1;
  }
  clusterRun run;
  memset(&run, 0, sizeof(run));
  run.o = o;
  run.ranks = (clusterRank*)calloc((size_t)o->size, sizeof(clusterRank));
  run.links = (railnetClusterLinkMsg*)calloc((size_t)o->size * (size_t)o->size / 2 + 1, sizeof(railnetClusterLinkMsg));
  run.times = (int*)calloc((size_t)o->size * (size_t)o->size / 2 + 1, sizeof(int));
  if (run.ranks == NULL || run.links == NULL || run.times == NULL) return 1;
  run.ranks[0].joined = run.ranks[0].alive = 1, run.ranks[0].fd = -1;
  gethostname(run.ranks[0].join.host, sizeof(run.ranks[0].join.host) - 1);
  run.ranks[0].join.size = (uint32_t)o->size;
  run.ranks[0].join.listenPort = pairServerListener(sv)->port;
  fprintf(stderr, "railnet-diag --cluster: rank 0 of %d waits for the ranks at %s for at most %d s (%s%s)\n",
          o->size, o->rendezvous, o->joinSec, o->tokenFrom ? "job token from " : "no job token: any process that "
          "reaches the rendezvous may join; give every rank the same --token", o->tokenFrom ? o->tokenFrom : "");
  int nAlive = gatherJoins(&run, lfd, railnetClockNs() + (uint64_t)o->joinSec * 1000000000ull);
  close(lfd);
  int* alive = (int*)calloc((size_t)o->size, sizeof(int));
  nAlive = 0;
  for (int r = 0; alive && r < o->size; r++)
    if (run.ranks[r].alive) alive[nAlive++] = r;
  printPlan(&run, nAlive);
  for (int round = 0; alive && round < run.rounds; round++) runRound(&run, sv, alive, nAlive, round);
  if (alive) measureAgain(&run, sv, alive, nAlive);
  clusterReport(&run);
  sectionEnd();
  int rc = reportFindings(0);
  railnetClusterDoneMsg d = {rc};
  for (int r = 1; r < o->size; r++)
    if (run.ranks[r].alive) railnetPairSend(run.ranks[r].fd, RAILNET_CLUSTER_DONE, &d, 1, railnetClockNs() + 5000000000ull);
  for (int r = 1; r < o->size; r++)
    if (run.ranks[r].joined) close(run.ranks[r].fd);
  free(alive);
  free(run.ranks);
  free(run.links);
  free(run.times);
  return rc;
}
