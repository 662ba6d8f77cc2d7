/* reverb's extension for fault-tolerant MPI programs (FTI's shape): protect memory, checkpoint
 * it, restore it after a restart. Messages are logged without any call: under
 * `reverb run --mpi --respawn N` with a logging protocol (REVERB_LOG), a failed node's ranks
 * restart alone, restore, and replay what they missed.
 *
 * The declarations are weak: a program built with them also links and runs on an MPI without
 * them (the functions are then NULL: test `if (MPIX_Reverb_protect)` before calling). */
#ifndef MPIX_REVERB_H
#define MPIX_REVERB_H

#ifdef __cplusplus
extern "C" {
#endif

/* Protects `bytes` at `ptr` in every later checkpoint. Call in the same order in every run:
 * the n-th region protected is the n-th restored. */
int MPIX_Reverb_protect(void *ptr, long bytes) __attribute__((weak));

/* A coordinated checkpoint of the protected memory over MPI_COMM_WORLD (collective). Take it
 * where every message sent to this rank so far has been received (the end of an iteration). */
int MPIX_Reverb_checkpoint(void) __attribute__((weak));

/* After a restart, writes the last checkpoint back into the protected memory and sets
 * *restored to 1; a first run (or a restart before any checkpoint) gets 0, memory untouched.
 * Call after protecting, before the computation (as FTI_Recover). */
int MPIX_Reverb_restore(int *restored) __attribute__((weak));

/* *flag = 1 if this process is a restarted incarnation of its rank. */
int MPIX_Reverb_restarted(int *flag) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#endif
