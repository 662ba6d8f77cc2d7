! A profiling library written in Fortran, over MPICH's Fortran binding: it defines MPI_SEND,
! MPI_RECV and MPI_FINALIZE (mpi_send_, ...), counts the program's calls, forwards each to its
! PMPI_ form (libmpichfort's pmpi_send_, ...) and prints the counts at MPI_FINALIZE. Preloaded
! (LD_PRELOAD), it comes before libmpichfort; built with gfortran alone, it links no MPI.
module pmpi_counts
  implicit none
  integer, save :: sends = 0, recvs = 0
end module pmpi_counts

subroutine MPI_SEND(buf, count, datatype, dest, tag, comm, ierr)
  use pmpi_counts
  implicit none
  integer :: buf(*), count, datatype, dest, tag, comm, ierr
  sends = sends + 1
  call PMPI_SEND(buf, count, datatype, dest, tag, comm, ierr)
end subroutine MPI_SEND

subroutine MPI_RECV(buf, count, datatype, source, tag, comm, status, ierr)
  use pmpi_counts
  implicit none
  integer :: buf(*), count, datatype, source, tag, comm, status(*), ierr
  recvs = recvs + 1
  call PMPI_RECV(buf, count, datatype, source, tag, comm, status, ierr)
end subroutine MPI_RECV

subroutine MPI_FINALIZE(ierr)
  use pmpi_counts
  implicit none
  integer :: ierr, rank
  integer, parameter :: MPI_COMM_WORLD = 1140850688 ! MPICH's mpif.h
  call PMPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  write (*, '(a,i0,a,i0,a,i0)') 'pmpi_counter.f90: rank ', rank, ': MPI_SEND ', sends, ' MPI_RECV ', recvs
  flush (6)
  call PMPI_FINALIZE(ierr)
end subroutine MPI_FINALIZE
