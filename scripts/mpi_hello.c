/* The mpirun side of the launch benchmark: the same work as examples/hello
 * (join, print rank/size/host, barrier, exit). */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int rank, size;
	char host[256];
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	gethostname(host, sizeof host);
	printf("hello from rank %d of %d on %s\n", rank, size, host);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	return 0;
}
