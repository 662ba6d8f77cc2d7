! A Fortran program on reverb (ci/mpi.sh), built by Debian's mpif90.mpich with interop.c: its
! calls go through MPICH's libmpichfort to reverb's libmpich.so.12. Checks what the Fortran
! binding adds to C: predefined attributes read as values; attributes set from Fortran
! (INTEGER and ADDRESS_KIND), copied and deleted by callbacks written in Fortran, and read from
! C as pointers to the integers; MPI_STATUS(ES)_IGNORE and MPI_IN_PLACE; statuses converted for
! C; a generalized request whose callbacks are Fortran subroutines. Rank 0 prints
! "fortran: ok" when every check holds on every rank.
module checks
  implicit none
  integer :: failures = 0, copies = 0, deletes = 0, deleted_sum = 0, queries = 0, frees = 0
contains
  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      print *, 'FAILED: ', what
    end if
  end subroutine check
end module checks

program fortran_check
  use mpi
  use checks
  use iso_c_binding, only: c_int
  implicit none
  interface
    integer(c_int) function c_attr_aint(comm, keyval) bind(C, name='c_attr_aint')
      import :: c_int
      integer(c_int), value :: comm, keyval
    end function c_attr_aint
    integer(c_int) function c_attr_int(comm, keyval) bind(C, name='c_attr_int')
      import :: c_int
      integer(c_int), value :: comm, keyval
    end function c_attr_int
    integer(c_int) function c_status_source(status) bind(C, name='c_status_source')
      import :: c_int
      integer(c_int) :: status(*)
    end function c_status_source
    integer(c_int) function c_is_status_ignore(status) bind(C, name='c_is_status_ignore')
      import :: c_int
      integer(c_int) :: status(*)
    end function c_is_status_ignore
  end interface
  external :: copy_fn, delete_fn, copy_f77, delete_f77, query_fn, free_fn, cancel_fn
  integer :: ierr, rank, nprocs, left, right, total, all_failures, count
  integer :: dup1, dup2, keyval, keyval77, tag_ub77, extra77, request, requests(2)
  integer :: status(MPI_STATUS_SIZE), sendbuf(2), recvbuf(2), box(2)
  integer(kind=MPI_ADDRESS_KIND) :: tag_ub, value, extra, greq_extra
  logical :: flag

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  right = mod(rank + 1, nprocs)
  left = mod(rank + nprocs - 1, nprocs)

  call MPI_Allreduce(rank + 1, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(total == nprocs * (nprocs + 1) / 2, 'MPI_Allreduce sum')
  box = [rank, 1]
  call MPI_Allreduce(MPI_IN_PLACE, box, 2, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  call check(box(1) == nprocs - 1 .and. box(2) == 1, 'MPI_Allreduce in place')

  ! A predefined attribute is its value in Fortran (C gets a pointer to it).
  call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, tag_ub, flag, ierr)
  call check(flag .and. tag_ub >= 32767 .and. tag_ub <= huge(1), 'MPI_TAG_UB is a value')
  call MPI_Attr_get(MPI_COMM_WORLD, MPI_TAG_UB, tag_ub77, flag, ierr)
  call check(flag .and. tag_ub77 == tag_ub, 'MPI_TAG_UB by MPI_Attr_get')

  ! Keyvals whose callbacks are Fortran: MPI-2's (ADDRESS_KIND) and MPI-1's (INTEGER).
  extra = 100
  extra77 = 2
  call MPI_Comm_create_keyval(copy_fn, delete_fn, keyval, extra, ierr)
  call MPI_Keyval_create(copy_f77, delete_f77, keyval77, extra77, ierr)
  call MPI_Comm_dup(MPI_COMM_WORLD, dup1, ierr)
  value = 7
  call MPI_Comm_set_attr(dup1, keyval, value, ierr)
  call MPI_Attr_put(dup1, keyval77, 5, ierr)
  call check(c_attr_aint(dup1, keyval) == 7, 'C reads an ADDRESS_KIND attribute')
  call check(c_attr_int(dup1, keyval77) == 5, 'C reads an INTEGER attribute')
  call MPI_Comm_dup(dup1, dup2, ierr)
  call check(copies == 2, 'both copy functions ran')
  call MPI_Comm_get_attr(dup2, keyval, value, flag, ierr)
  call check(flag .and. value == 107, 'copied by copy_fn: value + extra_state')
  call MPI_Attr_get(dup2, keyval77, count, flag, ierr)
  call check(flag .and. count == 10, 'copied by copy_f77: value * extra_state')
  call check(c_attr_int(dup2, keyval77) == 10, 'C reads the copy')
  call MPI_Comm_free(dup2, ierr)
  call check(deletes == 2 .and. deleted_sum == 117, 'delete functions of the copies')
  call MPI_Comm_delete_attr(dup1, keyval, ierr)
  call check(deletes == 3 .and. deleted_sum == 124, 'MPI_Comm_delete_attr')
  call MPI_Comm_free(dup1, ierr)
  call check(deletes == 4 .and. deleted_sum == 129, 'delete functions at MPI_Comm_free')
  call MPI_Comm_free_keyval(keyval, ierr)
  call MPI_Keyval_free(keyval77, ierr)

  ! Statuses: filled, ignored, and converted for C.
  sendbuf = [rank, 10 * rank]
  call MPI_Sendrecv(sendbuf, 2, MPI_INTEGER, right, 3, recvbuf, 2, MPI_INTEGER, left, 3, &
                    MPI_COMM_WORLD, status, ierr)
  call check(all(recvbuf == [left, 10 * left]), 'MPI_Sendrecv data')
  call check(status(MPI_SOURCE) == left .and. status(MPI_TAG) == 3, 'status source and tag')
  call MPI_Get_count(status, MPI_INTEGER, count, ierr)
  call check(count == 2, 'MPI_Get_count')
  call check(c_status_source(status) == left, 'MPI_Status_f2c and MPI_Status_c2f')
  call check(c_is_status_ignore(MPI_STATUS_IGNORE) == 1, 'MPI_F_STATUS_IGNORE is MPI_STATUS_IGNORE')
  call check(c_is_status_ignore(status) == 0, 'a status is not MPI_F_STATUS_IGNORE')
  recvbuf = -1
  call MPI_Sendrecv(sendbuf, 2, MPI_INTEGER, right, 4, recvbuf, 2, MPI_INTEGER, left, 4, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  call check(all(recvbuf == [left, 10 * left]), 'MPI_Sendrecv with MPI_STATUS_IGNORE')
  recvbuf = -1
  call MPI_Irecv(recvbuf, 2, MPI_INTEGER, left, 5, MPI_COMM_WORLD, requests(1), ierr)
  call MPI_Isend(sendbuf, 2, MPI_INTEGER, right, 5, MPI_COMM_WORLD, requests(2), ierr)
  call MPI_Waitall(2, requests, MPI_STATUSES_IGNORE, ierr)
  call check(all(recvbuf == [left, 10 * left]), 'MPI_Waitall with MPI_STATUSES_IGNORE')

  ! A generalized request: its query subroutine gives the status 3 integers.
  greq_extra = 3
  call MPI_Grequest_start(query_fn, free_fn, cancel_fn, greq_extra, request, ierr)
  call MPI_Grequest_complete(request, ierr)
  call MPI_Wait(request, status, ierr)
  call MPI_Get_count(status, MPI_INTEGER, count, ierr)
  call check(count == 3 .and. queries == 1 .and. frees == 1, 'generalized request in Fortran')

  call MPI_Reduce(failures, all_failures, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. all_failures == 0) print '(a)', 'fortran: ok'
  call MPI_Finalize(ierr)
end program fortran_check

subroutine copy_fn(oldcomm, keyval, extra, value_in, value_out, flag, ierr)
  use mpi
  use checks
  implicit none
  integer :: oldcomm, keyval, ierr
  integer(kind=MPI_ADDRESS_KIND) :: extra, value_in, value_out
  logical :: flag
  copies = copies + 1
  value_out = value_in + extra
  flag = .true.
  ierr = MPI_SUCCESS
end subroutine copy_fn

subroutine delete_fn(comm, keyval, value, extra, ierr)
  use mpi
  use checks
  implicit none
  integer :: comm, keyval, ierr
  integer(kind=MPI_ADDRESS_KIND) :: value, extra
  deletes = deletes + 1
  deleted_sum = deleted_sum + int(value)
  ierr = MPI_SUCCESS
end subroutine delete_fn

subroutine copy_f77(oldcomm, keyval, extra, value_in, value_out, flag, ierr)
  use mpi
  use checks
  implicit none
  integer :: oldcomm, keyval, extra, value_in, value_out, ierr
  logical :: flag
  copies = copies + 1
  value_out = value_in * extra
  flag = .true.
  ierr = MPI_SUCCESS
end subroutine copy_f77

subroutine delete_f77(comm, keyval, value, extra, ierr)
  use mpi
  use checks
  implicit none
  integer :: comm, keyval, value, extra, ierr
  deletes = deletes + 1
  deleted_sum = deleted_sum + value
  ierr = MPI_SUCCESS
end subroutine delete_f77

subroutine query_fn(extra, status, ierr)
  use mpi
  use checks
  implicit none
  integer(kind=MPI_ADDRESS_KIND) :: extra
  integer :: status(MPI_STATUS_SIZE), ierr
  queries = queries + 1
  call MPI_Status_set_elements(status, MPI_INTEGER, int(extra), ierr)
  call MPI_Status_set_cancelled(status, .false., ierr)
  status(MPI_SOURCE) = MPI_UNDEFINED
  status(MPI_TAG) = MPI_UNDEFINED
  ierr = MPI_SUCCESS
end subroutine query_fn

subroutine free_fn(extra, ierr)
  use mpi
  use checks
  implicit none
  integer(kind=MPI_ADDRESS_KIND) :: extra
  integer :: ierr
  frees = frees + 1
  ierr = MPI_SUCCESS
end subroutine free_fn

subroutine cancel_fn(extra, complete, ierr)
  use mpi
  implicit none
  integer(kind=MPI_ADDRESS_KIND) :: extra
  logical :: complete
  integer :: ierr
  ierr = MPI_SUCCESS
end subroutine cancel_fn
