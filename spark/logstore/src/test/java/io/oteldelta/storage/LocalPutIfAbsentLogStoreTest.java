package io.oteldelta.storage;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.FileNotFoundException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LocalPutIfAbsentLogStoreTest {

    @TempDir java.nio.file.Path dir;

    private final Configuration conf = new Configuration();
    private final LocalPutIfAbsentLogStore store = new LocalPutIfAbsentLogStore(conf);

    private Path commit(long version) {
        return new Path(dir.toUri().toString(), String.format("%020d.json", version));
    }

    private List<String> read(Path path) throws Exception {
        List<String> lines = new ArrayList<>();
        try (var it = store.read(path, conf)) {
            it.forEachRemaining(lines::add);
        }
        return lines;
    }

    private long strayFiles() throws Exception {
        try (Stream<java.nio.file.Path> files = Files.list(dir)) {
            return files.filter(p -> p.getFileName().toString().startsWith(".")).count();
        }
    }

    @Test
    void writesAllLinesAndLeavesNoTempFile() throws Exception {
        store.write(commit(0), List.of("{\"a\":1}", "{\"b\":2}").iterator(), false, conf);
        assertEquals(List.of("{\"a\":1}", "{\"b\":2}"), read(commit(0)));
        assertEquals(0, strayFiles());
    }

    @Test
    void existingVersionIsNeverReplaced() throws Exception {
        store.write(commit(1), List.of("first").iterator(), false, conf);
        assertThrows(
                FileAlreadyExistsException.class,
                () -> store.write(commit(1), List.of("second").iterator(), false, conf));
        assertEquals(List.of("first"), read(commit(1)));
        assertEquals(0, strayFiles());
    }

    @Test
    void overwriteReplaces() throws Exception {
        Path last = new Path(dir.toUri().toString(), "_last_checkpoint");
        store.write(last, List.of("old").iterator(), true, conf);
        store.write(last, List.of("new").iterator(), true, conf);
        assertEquals(List.of("new"), read(last));
        assertEquals(0, strayFiles());
    }

    @Test
    void missingDirectoryIsFileNotFound() {
        Path orphan = new Path(dir.resolve("absent").toUri().toString(), "0.json");
        assertThrows(
                FileNotFoundException.class,
                () -> store.write(orphan, List.of("x").iterator(), false, conf));
    }

    /** Many writers (separate store instances, as separate JVMs would be): exactly one wins. */
    @Test
    void concurrentWritersOfOneVersionHaveExactlyOneWinner() throws Exception {
        int writers = 8;
        ExecutorService pool = Executors.newFixedThreadPool(writers);
        CountDownLatch start = new CountDownLatch(1);
        List<Future<Boolean>> results = new ArrayList<>();
        for (int round = 0; round < 50; round++) {
            Path target = commit(100 + round);
            for (int w = 0; w < writers; w++) {
                String line = "writer-" + w;
                LocalPutIfAbsentLogStore own = new LocalPutIfAbsentLogStore(conf);
                Callable<Boolean> task =
                        () -> {
                            start.await();
                            try {
                                own.write(target, List.of(line).iterator(), false, conf);
                                return true;
                            } catch (FileAlreadyExistsException e) {
                                return false;
                            }
                        };
                results.add(pool.submit(task));
            }
        }
        start.countDown();
        int winners = 0;
        for (Future<Boolean> result : results) {
            winners += result.get() ? 1 : 0;
        }
        pool.shutdown();
        assertEquals(50, winners);
        for (int round = 0; round < 50; round++) {
            List<String> content = read(commit(100 + round));
            assertEquals(1, content.size());
            assertTrue(content.get(0).startsWith("writer-"));
        }
        assertEquals(0, strayFiles());
    }
}
