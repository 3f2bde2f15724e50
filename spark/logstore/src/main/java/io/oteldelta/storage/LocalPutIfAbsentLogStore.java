package io.oteldelta.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.BufferedWriter;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * A Delta {@code LogStore} for {@code file://} tables that publishes commits with put-if-absent.
 *
 * <p>Why: Spark's default store for local paths ({@code HDFSLogStore}) checks that commit N does
 * not exist and then renames its temp file onto it; on a local file system that rename replaces.
 * Its lock only covers one JVM, so a commit that another process (delta-rs, another Spark) puts in
 * between is silently replaced: an acknowledged commit is lost. delta-rs publishes with a hard
 * link, which the kernel refuses when the name exists. This store does the same, so both engines
 * agree on a single winner for every version.
 *
 * <p>How: the actions go to a hidden temp file in the same directory (fsynced); then
 *
 * <ul>
 *   <li>{@code overwrite=false} (commits): {@code link(temp, target)} — atomic and never replaces;
 *       an existing version raises {@link FileAlreadyExistsException}, which Delta answers by
 *       checking the winning commit for conflicts and retrying at the next version;
 *   <li>{@code overwrite=true} ({@code _last_checkpoint}): {@code rename(temp, target)} — atomic
 *       replace, so readers never see a partial file.
 * </ul>
 *
 * The temp file is always removed. Reads and listings are Hadoop's (inherited).
 */
public class LocalPutIfAbsentLogStore extends HadoopFileSystemLogStore {

    public LocalPutIfAbsentLogStore(Configuration initHadoopConf) {
        super(initHadoopConf);
    }

    @Override
    public void write(
            Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        java.nio.file.Path target = localPath(path, hadoopConf);
        java.nio.file.Path directory = target.getParent();
        if (directory == null || !Files.isDirectory(directory)) {
            throw new FileNotFoundException("No such directory: " + directory);
        }
        java.nio.file.Path temp =
                directory.resolve("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        try {
            writeSynced(temp, actions);
            if (overwrite) {
                Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE);
                // a checksum left by a Hadoop writer would no longer match the new content
                Files.deleteIfExists(directory.resolve("." + target.getFileName() + ".crc"));
            } else {
                publishIfAbsent(temp, target);
            }
            syncDirectory(directory);
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    /** Hard-links temp as target; the kernel refuses (EEXIST) if target exists. */
    private static void publishIfAbsent(java.nio.file.Path temp, java.nio.file.Path target)
            throws IOException {
        try {
            Files.createLink(target, temp);
        } catch (FileAlreadyExistsException e) {
            throw new FileAlreadyExistsException(target.toString());
        } catch (UnsupportedOperationException e) {
            throw new IOException(
                    "the file system holding " + target + " has no hard links, which "
                            + LocalPutIfAbsentLogStore.class.getSimpleName()
                            + " needs for put-if-absent commits",
                    e);
        }
    }

    /**
     * True although this store's own writes are atomic: Delta asks this to decide how it writes
     * checkpoint Parquet files, which bypass the store. A local file system does show partial
     * files, so Spark must keep writing checkpoints to a temp file and renaming them.
     */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return true;
    }

    private static java.nio.file.Path localPath(Path path, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (!(fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem)) {
            throw new IOException(
                    LocalPutIfAbsentLogStore.class.getSimpleName()
                            + " only supports local (file://) tables, not "
                            + path
                            + ": configure it as spark.delta.logStore.file.impl only");
        }
        return Paths.get(fs.makeQualified(path).toUri());
    }

    private static void writeSynced(java.nio.file.Path temp, Iterator<String> actions)
            throws IOException {
        try (FileChannel channel =
                        FileChannel.open(
                                temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
                Writer writer =
                        new BufferedWriter(
                                new OutputStreamWriter(
                                        Channels.newOutputStream(channel),
                                        StandardCharsets.UTF_8))) {
            while (actions.hasNext()) {
                writer.write(actions.next());
                writer.write('\n');
            }
            writer.flush();
            channel.force(true); // the commit is durable before it becomes visible
        }
    }

    /** Best effort: persist the new directory entry (not possible on every platform). */
    private static void syncDirectory(java.nio.file.Path directory) {
        try (FileChannel channel = FileChannel.open(directory, StandardOpenOption.READ)) {
            channel.force(true);
        } catch (IOException e) {
            // the commit is visible either way; only its durability across a crash is weaker
        }
    }
}
