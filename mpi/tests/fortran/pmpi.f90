! The Fortran program under the profiling libraries (ci/mpi.sh), as mpi/tests/c/pmpi.c: a token
! passed round the ring ROUNDS times (one MPI_Send and one MPI_Recv per rank per round), two
! MPI_Allreduce calls, and calls no counter counts: MPI_Iallreduce and MPI_Sendrecv. MPICH's
! Fortran wrappers (mpi_send_ and pmpi_send_ alike) call the C MPI_Send, so a C profiling
! library (pmpi_counter.c) sees this program's calls, and a Fortran one (pmpi_counter.f90)
! sees them one level up. Rank 0 prints "pmpi.f90: ok" when every answer is right.
program pmpi_check
  use mpi
  implicit none
  integer, parameter :: ROUNDS = 5
  integer :: ierr, rank, nprocs, left, right, round, failures, all_failures, request
  integer :: token(1), mine(1), total(1), biggest(1), isum(1), from_left(1)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  right = mod(rank + 1, nprocs)
  left = mod(rank + nprocs - 1, nprocs)
  failures = 0

  token = 0
  do round = 1, ROUNDS
    if (rank == 0) then
      call MPI_Send(token, 1, MPI_INTEGER, right, 7, MPI_COMM_WORLD, ierr)
      call MPI_Recv(token, 1, MPI_INTEGER, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    else
      call MPI_Recv(token, 1, MPI_INTEGER, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
      token = token + 1
      call MPI_Send(token, 1, MPI_INTEGER, right, 7, MPI_COMM_WORLD, ierr)
    end if
  end do
  if (rank == 0 .and. token(1) /= ROUNDS * (nprocs - 1)) failures = failures + 1

  mine = rank
  call MPI_Allreduce(mine, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(mine, biggest, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  if (total(1) /= nprocs * (nprocs - 1) / 2 .or. biggest(1) /= nprocs - 1) failures = failures + 1

  call MPI_Iallreduce(mine, isum, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, request, ierr)
  call MPI_Wait(request, MPI_STATUS_IGNORE, ierr)
  if (isum(1) /= total(1)) failures = failures + 1
  call MPI_Sendrecv(mine, 1, MPI_INTEGER, right, 8, from_left, 1, MPI_INTEGER, left, 8, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (from_left(1) /= left) failures = failures + 1

  call MPI_Reduce(failures, all_failures, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. all_failures == 0) print '(a)', 'pmpi.f90: ok'
  call MPI_Finalize(ierr)
end program pmpi_check
