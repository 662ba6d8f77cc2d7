! The fault-tolerant 1-D Jacobi heat solver of jacobi_ft.c in Fortran: a plain MPI program
! (MPI_Sendrecv halos, MPI_Allreduce of the residual, MPI_Gather of the result) made fault
! tolerant with three calls of mpix_reverb.f90: protect, restore, checkpoint. Rank 0 prints
! an FNV-1a checksum of the final field and residual, the same arithmetic and bytes as the C
! program's; after a node is killed and respawned it is bit-identical.
!
!   mpif90.mpich -fallow-argument-mismatch mpi/include/mpix_reverb.f90 jacobi_ft.f90 -o jacobi_ft_f
!   REVERB_LOG=causal reverb run --mpi -n 4 --ranks-per-node 2 --respawn 1 -- ./jacobi_ft_f 200 20
program jacobi_ft
  use mpi
  use mpix_reverb
  use iso_c_binding, only: c_double, c_int64_t, c_loc, c_long, c_sizeof
  use iso_fortran_env, only: error_unit, int8, int64
  implicit none
  integer, parameter :: CELLS = 256
  type, bind(C) :: state_t
    integer(c_int64_t) :: iter
    real(c_double) :: residual
    real(c_double) :: u(0:CELLS + 1) ! with the two halo cells
  end type state_t
  type(state_t), target :: s
  real(c_double) :: next(CELLS), local
  real(c_double), allocatable :: all(:)
  integer :: iters, every, rank, nprocs, left, right, ierr, restored, i

  iters = int_argument(1, 200)
  every = int_argument(2, 20)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  left = merge(rank - 1, MPI_PROC_NULL, rank > 0)
  right = merge(rank + 1, MPI_PROC_NULL, rank + 1 < nprocs)

  s%iter = 0
  s%residual = 0
  s%u = 0
  restored = 0
  if (mpix_reverb_available()) then
    ierr = mpix_reverb_protect(c_loc(s), int(c_sizeof(s), c_long))
    ierr = mpix_reverb_restore(restored)
  end if
  if (restored /= 0) write (error_unit, '(a,i0,a,i0)') 'jacobi_ft.f90: rank ', rank, &
    ' restored at iteration ', s%iter

  do while (s%iter < iters)
    ! Fixed ends: 100 at the left of the rod, 0 at the right.
    if (rank == 0) s%u(0) = 100
    if (rank == nprocs - 1) s%u(CELLS + 1) = 0
    call MPI_Sendrecv(s%u(1), 1, MPI_DOUBLE_PRECISION, left, 1, s%u(CELLS + 1), 1, &
                      MPI_DOUBLE_PRECISION, right, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(s%u(CELLS), 1, MPI_DOUBLE_PRECISION, right, 2, s%u(0), 1, &
                      MPI_DOUBLE_PRECISION, left, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    if (rank == 0) s%u(0) = 100
    if (rank == nprocs - 1) s%u(CELLS + 1) = 0
    local = 0
    do i = 1, CELLS
      next(i) = (s%u(i - 1) + s%u(i) + s%u(i + 1)) / 3
      local = local + (next(i) - s%u(i)) * (next(i) - s%u(i))
    end do
    s%u(1:CELLS) = next
    call MPI_Allreduce(local, s%residual, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    s%iter = s%iter + 1
    ! The end of an iteration: everything sent to this rank has been received.
    if (every > 0 .and. mod(s%iter, int(every, int64)) == 0 .and. s%iter < iters) then
      if (mpix_reverb_available()) ierr = mpix_reverb_checkpoint()
    end if
  end do

  allocate (all(merge(CELLS * nprocs, 1, rank == 0)))
  call MPI_Gather(s%u(1), CELLS, MPI_DOUBLE_PRECISION, all, CELLS, MPI_DOUBLE_PRECISION, 0, &
                  MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    write (*, '(a,i0,a,i0,a,es12.6e2,a,a)') 'jacobi_ft.f90: ', nprocs, ' ranks, ', s%iter, &
      ' iterations, residual ', s%residual, ', checksum ', &
      checksum([transfer(all, 0_int8, 8 * size(all)), transfer(s%residual, 0_int8, 8)])
  end if
  call MPI_Finalize(ierr)

contains

  integer function int_argument(n, default)
    integer, intent(in) :: n, default
    character(len=32) :: text
    integer :: status
    int_argument = default
    if (command_argument_count() < n) return
    call get_command_argument(n, text)
    read (text, *, iostat=status) int_argument
    if (status /= 0) int_argument = default
  end function int_argument

  ! 64-bit FNV-1a of `bytes` in lowercase hex, as jacobi_ft.c computes it. Fortran has no
  ! unsigned integers: the hash is two 32-bit halves, each product kept below 2**42.
  function checksum(bytes) result(hex)
    integer(int8), intent(in) :: bytes(:)
    character(len=16) :: hex
    integer(int64), parameter :: MASK = 4294967295_int64, PRIME_LOW = 435 ! 0x100000001b3
    integer(int64) :: hi, lo, product
    integer :: i
    hi = int(z'cbf29ce4', int64)
    lo = int(z'84222325', int64)
    do i = 1, size(bytes)
      lo = ieor(lo, iand(int(bytes(i), int64), 255_int64))
      ! h * (2**40 + 435) mod 2**64: the low half times 435 carries into the high half, and
      ! h * 2**40 adds the low half shifted by 8 to it.
      product = lo * PRIME_LOW
      hi = iand(hi * PRIME_LOW + ishft(product, -32) + ishft(iand(lo, 16777215_int64), 8), MASK)
      lo = iand(product, MASK)
    end do
    write (hex, '(z8.8,z8.8)') hi, lo
    do i = 1, len(hex)
      if (hex(i:i) >= 'A' .and. hex(i:i) <= 'F') hex(i:i) = achar(iachar(hex(i:i)) + 32)
    end do
  end function checksum

end program jacobi_ft
