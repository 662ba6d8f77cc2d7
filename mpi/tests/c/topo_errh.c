/* Graph topologies, error handlers, error classes, memory and info calls, beyond what
 * MPICH's tests check: a distributed graph with a repeated edge keeps each message apart
 * (the j-th edge to a rank meets that rank's j-th edge from here), a program's error
 * handler sees its communicator and code, an added code's class and string come back,
 * MPI_Alloc_mem is page-aligned and MPI_INFO_ENV holds the command (both reverb's choices,
 * which MPI allows; MPICH 4.0 differs there). 3 or more ranks. */
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

static void ring_with_double_edge(void) {
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    /* Each rank sends twice to its right neighbour and receives twice from its left. */
    int right = (me + 1) % n, left = (me + n - 1) % n;
    int dests[2] = {right, right}, sources[2] = {left, left};
    MPI_Comm g;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, sources, MPI_UNWEIGHTED, 2, dests, MPI_UNWEIGHTED,
                                   MPI_INFO_NULL, 0, &g);
    int status, indeg, outdeg, weighted;
    MPI_Topo_test(g, &status);
    CHECK(status == MPI_DIST_GRAPH, "MPI_Topo_test: %d", status);
    MPI_Dist_graph_neighbors_count(g, &indeg, &outdeg, &weighted);
    CHECK(indeg == 2 && outdeg == 2 && !weighted, "degrees %d %d weighted %d", indeg, outdeg, weighted);
    int send[3] = {100 * me, 100 * me + 1, 100 * me + 2}, recv[3] = {-1, -1, -1};
    /* First edge carries one int, the second two. */
    int scounts[2] = {1, 2}, sdispls[2] = {0, 1}, rcounts[2] = {1, 2}, rdispls[2] = {0, 1};
    MPI_Neighbor_alltoallv(send, scounts, sdispls, MPI_INT, recv, rcounts, rdispls, MPI_INT, g);
    CHECK(recv[0] == 100 * left && recv[1] == 100 * left + 1 && recv[2] == 100 * left + 2,
          "from %d: %d %d %d", left, recv[0], recv[1], recv[2]);
    MPI_Comm_free(&g);

    /* The same ring as a whole graph: node i's neighbours are i-1 and i+1. */
    int index[64], edges[128];
    for (int i = 0; i < n && i < 64; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + n - 1) % n;
        edges[2 * i + 1] = (i + 1) % n;
    }
    MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &g);
    int nn;
    MPI_Graph_neighbors_count(g, me, &nn);
    CHECK(nn == 2, "graph neighbours: %d", nn);
    int got[2] = {-1, -1};
    MPI_Neighbor_allgather(&me, 1, MPI_INT, got, 1, MPI_INT, g);
    CHECK(got[0] == left && got[1] == right, "allgather from the ring: %d %d", got[0], got[1]);
    MPI_Comm_free(&g);
}

static int calls = 0, seen_code = 0;
static MPI_Comm seen_comm = MPI_COMM_NULL;
static void handler(MPI_Comm *comm, int *code, ...) {
    calls++;
    seen_comm = *comm;
    seen_code = *code;
}

static void error_handling(void) {
    MPI_Comm dup;
    MPI_Errhandler eh;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_create_errhandler(handler, &eh);
    MPI_Comm_set_errhandler(dup, eh);
    MPI_Errhandler_free(&eh);
    int cls, code, got, len;
    char text[MPI_MAX_ERROR_STRING];
    MPI_Add_error_class(&cls);
    MPI_Add_error_code(cls, &code);
    MPI_Add_error_string(code, "reverb's test code");
    MPI_Error_class(code, &got);
    CHECK(got == cls, "class of an added code: %d, want %d", got, cls);
    MPI_Error_string(code, text, &len);
    CHECK(strcmp(text, "reverb's test code") == 0, "string of an added code: %s", text);
    MPI_Comm_call_errhandler(dup, code);
    CHECK(calls == 1 && seen_comm == dup && seen_code == code, "handler: %d calls, code %d", calls, seen_code);
    /* A real error on the communicator reaches the handler too, and the call returns. */
    int x = 0;
    int rc = MPI_Send(&x, 1, MPI_INT, 1 << 20, 0, dup);
    CHECK(calls == 2 && rc != MPI_SUCCESS && seen_code == rc, "handler on a bad rank: %d calls, rc %d", calls, rc);
    int *last, flag;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag);
    CHECK(flag && *last >= code, "MPI_LASTUSEDCODE %d below %d", flag ? *last : -1, code);
    MPI_Comm_free(&dup);
}

static void memory_and_info(void) {
    void *p = NULL;
    MPI_Alloc_mem(100000, MPI_INFO_NULL, &p);
    CHECK(p != NULL && (uintptr_t) p % (uintptr_t) sysconf(_SC_PAGESIZE) == 0, "MPI_Alloc_mem: %p", p);
    memset(p, 1, 100000);
    MPI_Free_mem(p);
    CHECK(MPI_Aint_add(100, -30) == 70 && MPI_Aint_diff(100, 30) == 70, "address arithmetic");
    char value[MPI_MAX_INFO_VAL];
    int flag = 0, buflen = sizeof value;
    MPI_Info_get_string(MPI_INFO_ENV, "command", &buflen, value, &flag);
    CHECK(flag && strstr(value, "topo_errh") != NULL, "MPI_INFO_ENV command: %s", flag ? value : "(none)");
    MPI_Pcontrol(1);
}

int main(int argc, char **argv) {
    /* Info objects work before MPI_Init (MPI 4.0). */
    MPI_Info early;
    MPI_Info_create(&early);
    MPI_Info_set(early, "key", "value");
    MPI_Init(&argc, &argv);
    int flag = 0, len = 0;
    MPI_Info_get_valuelen(early, "key", &len, &flag);
    CHECK(flag && len == 5, "an info made before MPI_Init: flag %d len %d", flag, len);
    MPI_Info_free(&early);
    ring_with_double_edge();
    error_handling();
    memory_and_info();
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (failures == 0 && me == 0) printf("topo_errh: ok\n");
    MPI_Finalize();
    return failures != 0;
}
